// WebSockets over HTTP/2 (RFC 8441) through the real edge: a page in headless Chromium, loaded over
// h2, opens WebSockets that ride the same h2 connection as extended CONNECT streams; Portico bridges
// them to the project's upstream as HTTP/1.1 upgrades. Node's http2 client covers refusals, timeouts
// and each way of closing.
import t from 'tap';
import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import path from 'node:path';
import dc from 'node:diagnostics_channel';
import { createHash, X509Certificate } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { WebSocketServer, type WebSocket } from 'ws';
import { startPortico, spawnPortico, tempDir } from '../helpers/portico.ts';
import { selfSigned } from '../../src/certs/fallback.ts';
import { closedPort } from '../helpers/upstream.ts';
import { admin, accountWithKey } from '../helpers/client.ts';
import { scrape } from '../helpers/prometheus.ts';
import { launchBrowser } from '../helpers/browser.ts';

// What the page does: open a WebSocket on this origin, send one message, and report every event.
const PAGE = `<!doctype html><title>ws</title><script>
window.openSocket = (path, closeAfterEcho) => new Promise((resolve) => {
  const events = [];
  const ws = new WebSocket('wss://' + location.host + path);
  ws.onopen = () => { events.push('open ' + ws.extensions); ws.send('hi from the page'); };
  ws.onmessage = (e) => {
    events.push('message ' + e.data);
    if (closeAfterEcho && e.data.startsWith('echo:')) ws.close(1000, 'page done');
  };
  ws.onerror = () => events.push('error');
  ws.onclose = (e) => resolve({ events, code: e.code, reason: e.reason, wasClean: e.wasClean });
});
</script>`;

// The project's upstream: the page at /, WebSockets under /ws/ (with permessage-deflate, to see the
// extension negotiated end to end), a refusal, an endpoint that never answers.
interface UpstreamSocket {
  url: string;
  received: string[];
  closed: Promise<{ code: number; reason: string }>;
  ws: WebSocket;
}
const upgrades: Array<{ url: string; headers: http.IncomingHttpHeaders }> = [];
const sockets: UpstreamSocket[] = [];
const wss = new WebSocketServer({ noServer: true, perMessageDeflate: true });
const origin = http.createServer((req, res) => {
  if (req.url === '/') res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(PAGE);
  else res.writeHead(404).end();
});
origin.on('upgrade', (req, socket, head) => {
  upgrades.push({ url: req.url ?? '', headers: req.headers });
  if (req.url === '/ws/refuse') {
    socket.end('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
    return;
  }
  if (req.url === '/ws/silent') {
    // holds the socket, never answers; closes once the other side has
    socket.once('end', () => socket.destroy());
    return;
  }
  if (req.url === '/ws/bad-accept') {
    // 101, but not for the key Portico sent
    socket.end('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: bm90IHRoZSByaWdodCBvbmU=\r\n\r\n');
    return;
  }
  if (!req.url?.startsWith('/ws/')) {
    // an application that ignores Upgrade and answers the request
    socket.end('HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n');
    return;
  }
  wss.handleUpgrade(req, socket, head, (ws) => {
    const closed = Promise.withResolvers<{ code: number; reason: string }>();
    const record: UpstreamSocket = { url: req.url ?? '', received: [], closed: closed.promise, ws };
    sockets.push(record);
    ws.on('close', (code, reason) => closed.resolve({ code, reason: reason.toString() }));
    ws.on('message', (data) => {
      record.received.push(data.toString());
      if (req.url === '/ws/echo') ws.send(`echo: ${data}`);
      if (req.url === '/ws/server-closes') ws.close(4001, 'bye from upstream');
    });
    ws.send('hello from upstream');
  });
});
const originSockets = new Set<net.Socket>();
origin.on('connection', (socket) => {
  originSockets.add(socket);
  socket.once('close', () => originSockets.delete(socket));
});
await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
t.teardown(async () => {
  for (const client of wss.clients) client.terminate();
  for (const socket of originSockets) socket.destroy();
  await new Promise((resolve) => origin.close(resolve));
});
const upstreamUrl = `http://127.0.0.1:${(origin.address() as net.AddressInfo).port}`;

// a short upstream timeout, so the silent upstream answers 504 quickly
const configFile = path.join(tempDir('config'), 'portico.yaml');
writeFileSync(configFile, readFileSync('config/portico.yaml', 'utf8').replace('upstreamMs: 30000', 'upstreamMs: 1500'));
const portico = await startPortico({ PORTICO_CONFIG: configFile });
t.teardown(() => portico.stop());
const { ports, ca } = portico;
const owner = await accountWithKey(ports.admin, 'business');
await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'site', upstream: upstreamUrl });
await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'down', upstream: `http://127.0.0.1:${await closedPort()}` });

// Everything the HTTPS listener sees, from Node's own diagnostics channels: every accepted TCP
// connection and every HTTP/2 stream with its session.
const accepted: net.Socket[] = [];
const streams: Array<{ session: http2.Http2Session; headers: http2.IncomingHttpHeaders }> = [];
const onSocket = ({ socket }: { socket: net.Socket }) => {
  if (socket.localPort === ports.https) accepted.push(socket);
};
const onStream = ({ stream, headers }: { stream: http2.ServerHttp2Stream; headers: http2.IncomingHttpHeaders }) => {
  if (stream.session?.socket?.localPort === ports.https) streams.push({ session: stream.session, headers });
};
// HTTP/1.1 requests on the HTTPS listener (an upgrade request is not published here: the 101 metric counts those)
let h1Requests = 0;
const onH1Request = ({ socket }: { socket: net.Socket }) => {
  if (socket.localPort === ports.https) h1Requests++;
};
dc.subscribe('net.server.socket', onSocket as dc.ChannelListener);
dc.subscribe('http2.server.stream.start', onStream as dc.ChannelListener);
dc.subscribe('http.server.request.start', onH1Request as dc.ChannelListener);
t.teardown(() => {
  dc.unsubscribe('net.server.socket', onSocket as dc.ChannelListener);
  dc.unsubscribe('http2.server.stream.start', onStream as dc.ChannelListener);
  dc.unsubscribe('http.server.request.start', onH1Request as dc.ChannelListener);
});

const metricValue = async (labels: string) => {
  const text = await scrape(ports.admin);
  const line = text.split('\n').find((l) => l.startsWith(`portico_http_requests_total{${labels}}`));
  return line ? Number(line.split(' ').at(-1)) : 0;
};

t.test('a page served over h2 opens WebSockets on the same h2 connection', async (t) => {
  // Chromium trusts the fallback certificate by its public key (it is self-signed, for other names)
  const spki = createHash('sha256').update(new X509Certificate(ca).publicKey.export({ type: 'spki', format: 'der' })).digest('base64');
  const launched = await launchBrowser([`--ignore-certificate-errors-spki-list=${spki}`]);
  if ('skip' in launched) {
    t.plan(0, launched.skip);
    return;
  }
  const { browser } = launched;
  t.teardown(() => browser.close());
  const page = await browser.newPage();
  accepted.length = 0;
  streams.length = 0;
  h1Requests = 0;
  const h1UpgradesBefore = await metricValue('route="project",method="GET",status="101"');

  const loaded = await page.goto(`https://site.localhost:${ports.https}/`);
  t.equal(loaded?.status(), 200, 'the page loads');
  type Outcome = { events: string[]; code: number; reason: string; wasClean: boolean };
  const open = (socketPath: string, closeAfterEcho: boolean) =>
    page.evaluate(([p, c]) => (globalThis as unknown as { openSocket(p: string, c: boolean): Promise<Outcome> }).openSocket(p, c), [socketPath, closeAfterEcho] as const);

  // messages both ways, then the page closes
  const echo = await open('/ws/echo', true);
  t.match(echo.events[0], /^open permessage-deflate/, 'opened, with the upstream\'s permessage-deflate passed through');
  t.same(echo.events.slice(1), ['message hello from upstream', 'message echo: hi from the page'], 'upstream → page and page → upstream → page');
  t.same([echo.code, echo.reason, echo.wasClean], [1000, 'page done', true], 'the page\'s close completes cleanly');
  const echoSide = sockets.find((s) => s.url === '/ws/echo')!;
  t.same(echoSide.received, ['hi from the page'], 'the upstream got the page\'s message');
  t.same(await echoSide.closed, { code: 1000, reason: 'page done' }, 'the upstream saw the page\'s close code and reason');

  // the upstream closes
  const closedByUpstream = await open('/ws/server-closes', false);
  t.same([closedByUpstream.code, closedByUpstream.reason, closedByUpstream.wasClean], [4001, 'bye from upstream', true], 'the upstream\'s close reaches the page cleanly');

  // the upstream refuses: the page sees a failed WebSocket
  const refused = await open('/ws/refuse', false);
  t.same(refused.events, ['error'], 'never opened, an error event');
  t.equal(refused.code, 1006, 'closed abnormally (1006)');

  // the proof that these went over h2, from the listener's side
  const pageStream = streams.find((s) => s.headers[':method'] === 'GET' && s.headers[':path'] === '/');
  t.ok(pageStream, 'the page was loaded by an HTTP/2 stream');
  const connects = streams.filter((s) => s.headers[':method'] === 'CONNECT');
  t.same(connects.map((s) => [s.headers[':protocol'], s.headers[':path']]), [['websocket', '/ws/echo'], ['websocket', '/ws/server-closes'], ['websocket', '/ws/refuse']], 'each WebSocket was an extended CONNECT stream');
  t.ok(connects.every((s) => s.session === pageStream!.session), 'on the same h2 session as the page load');
  const h2Sockets = new Set(streams.map((s) => (s.session.socket as unknown as { _parent: net.Socket })._parent));
  t.equal(h1Requests, 0, 'no HTTP/1.1 request reached the HTTPS listener');
  t.equal(await metricValue('route="project",method="GET",status="101"'), h1UpgradesBefore, 'no HTTP/1.1 upgrade was answered');
  t.equal(h2Sockets.size, 1, 'one h2 connection carried every stream');
  // a browser may open a spare connection that carries nothing: said, not asserted
  t.comment(`TCP connections the HTTPS listener accepted: ${accepted.length}, of which ${accepted.filter((socket) => h2Sockets.has(socket)).length} carried the h2 session`);
  t.ok(await metricValue('route="project",method="CONNECT",status="200"') >= 2, 'the h2 WebSockets are counted');

  const headers = upgrades.find((u) => u.url === '/ws/echo')!.headers;
  t.equal(headers.host, new URL(upstreamUrl).host, 'Host upstream is the upstream\'s own');
  t.equal(headers['x-forwarded-host'], 'site.localhost');
  t.equal(headers['x-forwarded-proto'], 'https');
  t.ok(net.isIP(String(headers['x-forwarded-for'])), 'X-Forwarded-For is the client address');
  t.equal(headers.origin, `https://site.localhost:${ports.https}`, 'end-to-end headers pass (Origin)');
  t.same([headers.connection, headers.upgrade, headers['sec-websocket-version']], ['Upgrade', 'websocket', '13'], 'an HTTP/1.1 upgrade');
  t.notOk(Object.keys(headers).some((name) => name.startsWith(':')), 'no pseudo-headers upstream');
});

// ---- Node's http2 client: a WebSocket client in a few lines (frames of < 126 bytes) ----

function h2(servername = 'site.localhost') {
  const session = http2.connect(`https://127.0.0.1:${ports.https}`, { ca, servername, checkServerIdentity: () => undefined });
  session.on('error', () => undefined);
  return session;
}

function connect(session: http2.ClientHttp2Session, pathname: string, extra: http2.OutgoingHttpHeaders = {}) {
  const stream = session.request({ ':method': 'CONNECT', ':protocol': 'websocket', ':scheme': 'https', ':path': pathname, ':authority': 'site.localhost', 'sec-websocket-version': '13', ...extra });
  stream.on('error', () => undefined);
  const status = new Promise<number>((resolve) => {
    stream.once('response', (h) => resolve(Number(h[':status'])));
    stream.once('close', () => resolve(0));
  });
  return { stream, status };
}

/** a masked client frame (RFC 6455 §5.2) */
function frame(opcode: number, payload: Buffer): Buffer {
  const mask = Buffer.from([0x12, 0x34, 0x56, 0x78]);
  return Buffer.concat([Buffer.from([0x80 | opcode, 0x80 | payload.length]), mask, Buffer.from(payload.map((b, i) => b ^ mask[i % 4]))]);
}
const closeFrame = (code: number) => frame(0x8, Buffer.from([code >> 8, code & 0xff]));

/** server frames as [opcode, payload] (unmasked, short) */
function frames(stream: http2.ClientHttp2Stream): Array<[number, Buffer]> {
  const seen: Array<[number, Buffer]> = [];
  let buffer = Buffer.alloc(0);
  stream.on('data', (chunk: Buffer) => {
    buffer = Buffer.concat([buffer, chunk]);
    while (buffer.length >= 2 && buffer.length >= 2 + (buffer[1] & 0x7f)) {
      const length = buffer[1] & 0x7f;
      seen.push([buffer[0] & 0x0f, buffer.subarray(2, 2 + length)]);
      buffer = buffer.subarray(2 + length);
    }
  });
  return seen;
}

const until = async (what: string, check: () => boolean, ms = 5_000) => {
  for (const deadline = Date.now() + ms; !check(); ) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
};
const closed = (stream: http2.Http2Stream) => new Promise<number>((resolve) => (stream.closed ? resolve(stream.rstCode ?? 0) : stream.once('close', () => resolve(stream.rstCode ?? 0))));

t.test('refusals: the stream is answered with a status, the WebSocket never opens', async (t) => {
  const session = h2();
  t.teardown(() => session.close());
  await new Promise((resolve) => session.once('remoteSettings', resolve));
  t.equal(session.remoteSettings.enableConnectProtocol, true, 'the listener advertises SETTINGS_ENABLE_CONNECT_PROTOCOL');
  t.equal(await connect(session, '/ws/refuse').status, 403, 'the upstream\'s 403');
  t.equal(await connect(session, '/').status, 502, 'an upstream that answers 200 without upgrading → 502');
  t.equal(await connect(session, '/ws/bad-accept').status, 502, 'a 101 whose Sec-WebSocket-Accept does not match the key → 502');
  const started = Date.now();
  t.equal(await connect(session, '/ws/silent').status, 504, 'an upstream that never answers → 504');
  t.ok(Date.now() - started < 10_000, `after the upstream timeout (${Date.now() - started} ms, upstreamMs 1500)`);
  const down = http2.connect(`https://127.0.0.1:${ports.https}`, { ca, servername: 'down.localhost', checkServerIdentity: () => undefined });
  t.teardown(() => down.close());
  t.equal(await connect(down, '/ws', { ':authority': 'down.localhost' }).status, 502, 'an upstream that refuses connections → 502');
  t.equal(await connect(session, '/ws/echo', { ':authority': 'nobody.localhost' }).status, 421, 'an :authority other than the SNI → 421');
  const noSuchSite = h2('nobody.localhost');
  t.teardown(() => noSuchSite.close());
  t.equal(await connect(noSuchSite, '/ws/echo', { ':authority': 'nobody.localhost' }).status, 404, 'not a project → 404');
  t.equal(await connect(session, '/ws/echo', { ':protocol': 'chat' }).status, 501, 'another :protocol → 501');
  t.equal(await connect(session, '/ws/echo', { host: 'other.localhost' }).status, 400, 'a Host field naming another site than :authority → 400 (RFC 9113 §8.3.1)');
  const plain = session.request({ ':method': 'CONNECT', ':authority': 'site.localhost:443' });
  plain.on('error', () => undefined);
  t.equal(await new Promise((resolve) => plain.once('response', (h) => resolve(h[':status']))), 405, 'a plain CONNECT (a tunnel) → 405');

  const h1 = await new Promise<string>((resolve) => {
    const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: 'site.localhost', ca, checkServerIdentity: () => undefined, ALPNProtocols: ['http/1.1'] }, () =>
      socket.write('CONNECT site.localhost:443 HTTP/1.1\r\nHost: site.localhost:443\r\n\r\n'));
    let text = '';
    socket.on('data', (c) => (text += c));
    socket.on('close', () => resolve(text));
    socket.on('error', () => undefined);
  });
  t.match(h1, /^HTTP\/1\.1 405 /, 'CONNECT over HTTP/1.1 → 405');
});

t.test('closing, each way', async (t) => {
  const session = h2();
  t.teardown(() => session.close());

  // the client closes cleanly: close frame, then END_STREAM
  const a = connect(session, '/ws/echo');
  t.equal(await a.status, 200);
  const aFrames = frames(a.stream);
  a.stream.write(frame(0x1, Buffer.from('ping')));
  await until('the echo', () => aFrames.some(([op, p]) => op === 0x1 && p.toString() === 'echo: ping'));
  a.stream.write(closeFrame(1000));
  a.stream.end();
  const aSide = sockets.findLast((s) => s.url === '/ws/echo')!;
  t.same((await aSide.closed).code, 1000, 'the upstream got the close');
  await until('the upstream close frame', () => aFrames.some(([op]) => op === 0x8));
  t.equal(await closed(a.stream), 0, 'the stream ends without a reset');

  // the client resets the stream: the upstream connection is cut
  let count = sockets.length;
  const b = connect(session, '/ws/echo');
  t.equal(await b.status, 200);
  await until('the upstream socket', () => sockets.length === count + 1);
  const bSide = sockets.at(-1)!;
  b.stream.close(http2.constants.NGHTTP2_CANCEL);
  t.equal((await bSide.closed).code, 1006, 'the upstream sees its connection cut (1006)');

  // the upstream closes cleanly: its close frame, then END_STREAM
  const c = connect(session, '/ws/server-closes');
  t.equal(await c.status, 200);
  const cFrames = frames(c.stream);
  c.stream.write(frame(0x1, Buffer.from('close please')));
  await until('the upstream close frame', () => cFrames.some(([op]) => op === 0x8));
  const [, payload] = cFrames.find(([op]) => op === 0x8)!;
  t.equal(payload.readUInt16BE(0), 4001, 'the upstream\'s close code');
  c.stream.write(closeFrame(4001));
  await new Promise((resolve) => c.stream.once('end', resolve));
  t.pass('END_STREAM after the upstream closed its connection');
  c.stream.end();
  t.equal(await closed(c.stream), 0, 'no reset');

  // the upstream connection breaks: the stream is reset with CANCEL (RFC 8441 §5)
  count = sockets.length;
  const d = connect(session, '/ws/echo');
  t.equal(await d.status, 200);
  await until('the upstream socket', () => sockets.length === count + 1);
  sockets.at(-1)!.ws.terminate();
  t.equal(await closed(d.stream), http2.constants.NGHTTP2_CANCEL, 'RST_STREAM(CANCEL)');

  await until('the upstream sockets of closed WebSockets to go', () => [...originSockets].length === 0, 5_000).catch(() => undefined);
  t.equal(originSockets.size, 0, 'no upstream socket left open');
  t.equal(session.closed || session.destroyed, false, 'the h2 connection itself stayed up throughout');
});

t.test('a quiet WebSocket outlives the h2 connection\'s idle timeout, which applies again once it closes', async (t) => {
  // connections idle for max(keepAliveMs, requestMs) = 1 s close
  const file = path.join(tempDir('config'), 'portico.yaml');
  writeFileSync(file, readFileSync('config/portico.yaml', 'utf8').replace('keepAliveMs: 5000', 'keepAliveMs: 500').replace('requestMs: 60000', 'requestMs: 1000').replace('headersMs: 10000', 'headersMs: 1000'));
  const quick = await startPortico({ PORTICO_CONFIG: file });
  t.teardown(() => quick.stop());
  const account = await accountWithKey(quick.ports.admin, 'business');
  await admin(quick.ports.admin, 'POST', '/admin/projects', { accountId: account.accountId, name: 'site', upstream: upstreamUrl });
  const session = http2.connect(`https://127.0.0.1:${quick.ports.https}`, { ca: quick.ca, servername: 'site.localhost', checkServerIdentity: () => undefined });
  session.on('error', () => undefined);
  t.teardown(() => session.destroy());
  const sessionClosed = new Promise<number>((resolve) => session.once('close', () => resolve(performance.now())));

  const ws = connect(session, '/ws/echo');
  t.equal(await ws.status, 200);
  const seen = frames(ws.stream);
  await until('the upstream\'s hello', () => seen.length === 1);
  await new Promise((resolve) => setTimeout(resolve, 2_500));
  t.notOk(session.closed || session.destroyed, 'after 2.5 s of silence the connection is still open');
  ws.stream.write(frame(0x1, Buffer.from('still here')));
  await until('the echo', () => seen.some(([op, p]) => op === 0x1 && p.toString() === 'echo: still here'));
  t.pass('and the WebSocket still carries messages both ways');

  ws.stream.write(closeFrame(1000));
  ws.stream.end();
  const wsClosed = performance.now();
  await closed(ws.stream);
  const at = await Promise.race([sessionClosed, new Promise<number>((resolve) => setTimeout(() => resolve(-1), 5_000))]);
  t.ok(at > 0, `once the WebSocket closed, the idle connection closed too (after ${Math.round(at - wsClosed)} ms)`);
});

t.test('the upstream gets the same headers as for an HTTP/1.1 upgrade: forwarding headers are Portico\'s', async (t) => {
  const session = h2();
  t.teardown(() => session.close());
  const before = upgrades.length;
  const ws = connect(session, '/ws/echo?room=7', {
    'x-forwarded-for': '203.0.113.66',
    'x-forwarded-host': 'evil.example',
    'x-forwarded-proto': 'http',
    forwarded: 'for=203.0.113.66',
    'x-real-ip': '203.0.113.66',
    'x-forwarded-port': '1',
    'sec-websocket-protocol': 'chat',
    'x-app': 'kept',
  });
  t.equal(await ws.status, 200);
  const { url, headers } = upgrades[before];
  t.equal(url, '/ws/echo?room=7', 'path and query');
  t.equal(headers['x-forwarded-for'], '127.0.0.1', 'X-Forwarded-For is the TCP peer, not what the client sent');
  t.equal(headers['x-forwarded-host'], 'site.localhost');
  t.equal(headers['x-forwarded-proto'], 'https');
  for (const name of ['forwarded', 'x-real-ip', 'x-forwarded-port']) t.notOk(name in headers, `${name} is dropped`);
  t.equal(headers['x-app'], 'kept', 'other end-to-end headers pass');
  t.equal(headers['sec-websocket-protocol'], 'chat', 'the subprotocols offered pass');
  t.equal(headers['sec-websocket-key']?.length, 24, 'a Sec-WebSocket-Key made by Portico');
  ws.stream.close(http2.constants.NGHTTP2_CANCEL);
});

t.test('an https:// upstream: its certificate is verified (NODE_EXTRA_CA_CERTS), an untrusted one is a 502', async (t) => {
  const trusted = await selfSigned(['127.0.0.1'], 1);
  const untrusted = await selfSigned(['127.0.0.1'], 1);
  const echo = new WebSocketServer({ noServer: true });
  echo.on('connection', (ws) => ws.on('message', (data) => ws.send(`echo: ${data}`)));
  const origins = [trusted, untrusted].map(({ key, cert }) => {
    const server = https.createServer({ key, cert });
    server.on('upgrade', (req, socket, head) => echo.handleUpgrade(req, socket, head, (ws) => echo.emit('connection', ws, req)));
    return server;
  });
  for (const server of origins) await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(async () => {
    for (const client of echo.clients) client.terminate();
    for (const server of origins) {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
  const caPath = path.join(tempDir('upstream-ca'), 'ca.pem');
  writeFileSync(caPath, trusted.cert);
  // a process of its own: Node reads NODE_EXTRA_CA_CERTS once, at start
  const child = await spawnPortico({ NODE_EXTRA_CA_CERTS: caPath });
  t.teardown(() => child.kill());
  const account = await accountWithKey(child.ports.admin, 'business');
  const [good, bad] = origins.map((server) => `https://127.0.0.1:${(server.address() as net.AddressInfo).port}`);
  await admin(child.ports.admin, 'POST', '/admin/projects', { accountId: account.accountId, name: 'secure', upstream: good });
  await admin(child.ports.admin, 'POST', '/admin/projects', { accountId: account.accountId, name: 'untrusted', upstream: bad });

  const open = (name: string) => {
    const session = http2.connect(`https://127.0.0.1:${child.ports.https}`, { ca: child.ca, servername: `${name}.localhost`, checkServerIdentity: () => undefined });
    session.on('error', () => undefined);
    t.teardown(() => session.destroy());
    return connect(session, '/ws', { ':authority': `${name}.localhost` });
  };
  const ws = open('secure');
  t.equal(await ws.status, 200, 'the WebSocket opens through TLS to the upstream');
  const seen = frames(ws.stream);
  ws.stream.write(frame(0x1, Buffer.from('over tls')));
  await until('the echo', () => seen.some(([op, p]) => op === 0x1 && p.toString() === 'echo: over tls'));
  t.pass('messages both ways');
  ws.stream.close(http2.constants.NGHTTP2_CANCEL);
  t.equal(await open('untrusted').status, 502, 'an upstream certificate no CA vouches for → 502, never a plaintext or unchecked fallback');
});
