// HTTP/1.1 WebSocket upgrades at their edges, through a real Portico over TLS with SNI, to a raw TCP
// upstream whose every byte a case writes: a refusal whose upstream resets mid-body was followed by a
// whole 502 inside its body; the upstream's hop-by-hop and framing fields reached the visitor on a 101
// and on refusals (and a 101 without Upgrade, or to h2c, went out as a switch); a refusal's body could
// go silent forever; upgrades to the API, a redirect domain, an unknown host or another host than the
// SNI got a bare 404; and no upgrade had an access line, while the 101 was counted before the upstream
// had answered. A real `ws` client opens a WebSocket through it too.
import t from 'tap';
import net from 'node:net';
import tls from 'node:tls';
import path from 'node:path';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { WebSocket, type ClientOptions } from 'ws';
import { startPortico, tempDir, cleanup } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { admin, accountWithKey } from '../helpers/client.ts';
import { parseExposition, scrape, sum } from '../helpers/prometheus.ts';

const UPSTREAM_MS = 1000;
const KEY = 'dGhlIHNhbXBsZSBub25jZQ==';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const acceptOf = (key: string) => createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');

// the upstream: each request's path picks what it writes back (the head it got is passed along)
type Answer = (socket: net.Socket, head: string) => void;
const answers = new Map<string, Answer>();
const upstreamSockets = new Set<net.Socket>();
const upstream = net.createServer((socket) => {
  upstreamSockets.add(socket);
  socket.on('error', () => undefined);
  socket.once('close', () => upstreamSockets.delete(socket));
  let buffered = '';
  const onData = (chunk: Buffer) => {
    buffered += chunk.toString('latin1');
    const end = buffered.indexOf('\r\n\r\n');
    if (end === -1) return;
    socket.off('data', onData);
    const head = buffered.slice(0, end);
    const answer = answers.get(head.split(' ')[1].split('?')[0]);
    if (answer) answer(socket, head);
    else socket.end('HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n');
  };
  socket.on('data', onData);
});
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
t.teardown(async () => {
  for (const socket of upstreamSockets) socket.destroy();
  await new Promise((resolve) => upstream.close(resolve));
});

const dns = await startChalltestsrv();
t.teardown(() => dns.stop());
const dir = tempDir('ws-h1-edges');
t.teardown(() => cleanup(dir));
const configFile = path.join(dir, 'portico.yaml');
writeFileSync(configFile, readFileSync('config/portico.yaml', 'utf8').replace(/upstreamMs: \d+/, `upstreamMs: ${UPSTREAM_MS}`));
const portico = await startPortico({ PORTICO_CONFIG: configFile, PORTICO_DNS_SERVERS: dns.dnsServer, PORTICO_PUBLIC_HTTPS_PORT: '443' });
t.teardown(async () => {
  await portico.stop();
  cleanup(portico.dataDir, portico.certsDir);
});
const { ports, ca } = portico;
const owner = await accountWithKey(ports.admin, 'pro');
const project = (await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'chat', upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` })).json;
const HOSTNAME: string = project.defaultDomain;
// a redirect domain: verified through the test DNS server, then sent to the project's hostname
await admin(ports.admin, 'POST', `/admin/projects/${project.id}/domains`, { hostname: 'www.chat.example' });
await dns.setCname('www.chat.example', 'edge.localhost');
const verified = await admin(ports.admin, 'POST', `/admin/projects/${project.id}/domains/www.chat.example/verify`);
const redirect = await admin(ports.admin, 'POST', `/admin/projects/${project.id}/redirects`, { from: 'www.chat.example', to: HOSTNAME, status: 308 });

const upgradeRequest = (hostname: string, target: string) =>
  `GET ${target} HTTP/1.1\r\nHost: ${hostname}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${KEY}\r\n\r\n`;

interface Exchange {
  /** everything read, as latin1 */
  text: string;
  /** the server closed the connection (not the 4 s guard) */
  closedByServer: boolean;
  ms: number;
}

/** one upgrade request on a new TLS connection (ALPN http/1.1, SNI `servername`); reads until the server closes, or `keepMs` */
function exchange(bytes: string, servername = HOSTNAME, keepMs = 4_000): Promise<Exchange> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    let text = '';
    let guard: NodeJS.Timeout | undefined;
    let byGuard = false;
    const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername, ca, checkServerIdentity: () => undefined, ALPNProtocols: ['http/1.1'] }, () => {
      socket.write(bytes);
      guard = setTimeout(() => {
        byGuard = true;
        socket.destroy();
      }, keepMs);
    });
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
    socket.on('error', reject);
    socket.on('close', () => {
      clearTimeout(guard);
      resolve({ text, closedByServer: !byGuard, ms: Date.now() - started });
    });
  });
}

/** the head of the first answer: status and fields (names lowercased, repeated ones kept) */
function headOf(text: string): { status: number; fields: Array<[string, string]>; body: string } {
  const end = text.indexOf('\r\n\r\n');
  const [statusLine, ...lines] = text.slice(0, end).split('\r\n');
  return {
    status: Number(statusLine.split(' ')[1]),
    fields: lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()] as [string, string]),
    body: text.slice(end + 4),
  };
}
const values = (fields: Array<[string, string]>, name: string) => fields.filter(([n]) => n === name).map(([, v]) => v);
const statusLines = (text: string) => text.match(/HTTP\/1\.1 \d{3}/g) ?? [];

/** the access lines written so far for `path` (lines are flushed at least every 250 ms) */
const accessLines = (linePath: string) => portico.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'request' && entry.path === linePath);
async function accessLine(linePath: string): Promise<Record<string, unknown>> {
  for (let i = 0; i < 40 && accessLines(linePath).length === 0; i++) await sleep(50);
  const lines = accessLines(linePath);
  if (lines.length !== 1) throw new Error(`${lines.length} access lines for ${linePath}`);
  return lines[0];
}
const requests = async (labels: Record<string, string>) => sum(parseExposition(await scrape(ports.admin)), 'portico_http_requests_total', labels);

t.test('a refusal whose upstream resets mid-body is cut, never followed by a second answer (502) inside its body', async (t) => {
  answers.set('/refuse-reset', (socket) => {
    socket.write('HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n\r\npartial body ');
    setTimeout(() => socket.resetAndDestroy(), 150);
  });
  answers.set('/refuse-reset-length', (socket) => {
    socket.write('HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\npartial body ');
    setTimeout(() => socket.resetAndDestroy(), 150);
  });
  for (const target of ['/refuse-reset', '/refuse-reset-length']) {
    const answer = await exchange(upgradeRequest(HOSTNAME, target));
    t.same(statusLines(answer.text), ['HTTP/1.1 403'], `${target}: one answer, the upstream's`);
    t.ok(answer.closedByServer, `${target}: the connection is closed`);
    t.notMatch(headOf(answer.text).body, /0\r\n\r\n$/, `${target}: the cut body is not ended as if it were whole`);
    t.match(await accessLine(target), { status: 502, aborted: true, route: 'project' }, `${target}: its access line says it failed`);
  }
});

t.test('a 101: the upstream\'s hop-by-hop and framing fields stay on its hop; end-to-end ones reach a real WebSocket client', async (t) => {
  answers.set('/chat', (socket, head) => {
    const key = /sec-websocket-key: *(\S+)/i.exec(head)![1];
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade, X-Secret\r\nX-Secret: s\r\nKeep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\nSec-WebSocket-Accept: ${acceptOf(key)}\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n`);
    // an unmasked text frame (RFC 6455 §5.2)
    socket.write(Buffer.from([0x81, 5, ...Buffer.from('hello')]));
  });
  // the bytes as the visitor reads them
  const raw = headOf((await exchange(upgradeRequest(HOSTNAME, '/chat'), HOSTNAME, 300)).text);
  t.equal(raw.status, 101);
  for (const name of ['x-secret', 'keep-alive', 'transfer-encoding', 'content-length']) t.same(values(raw.fields, name), [], `${name} stays on the upstream hop`);
  t.same(values(raw.fields, 'connection'), ['Upgrade'], 'Connection names only the upgrade');
  t.same(values(raw.fields, 'upgrade'), ['websocket']);
  t.same(values(raw.fields, 'set-cookie'), ['a=1', 'b=2'], 'end-to-end fields pass, repeated ones too');
  t.same(values(raw.fields, 'sec-websocket-accept'), [acceptOf(KEY)]);
  t.equal(raw.body, '\x81\x05hello', 'then the tunnel\'s bytes, unframed');

  // a real client: it checks Sec-WebSocket-Accept and reads the frame
  const ws = new WebSocket(`wss://127.0.0.1:${ports.https}/chat`, { servername: HOSTNAME, headers: { host: HOSTNAME }, ca, checkServerIdentity: () => undefined } as unknown as ClientOptions);
  ws.on('error', () => undefined);
  const message = await new Promise<string>((resolve, reject) => {
    ws.once('message', (data: Buffer) => resolve(data.toString()));
    ws.once('error', reject);
  });
  t.equal(message, 'hello', 'the WebSocket opened and carries the upstream\'s frame');
  ws.terminate();
});

t.test('a 101 without Upgrade, or switching to another protocol than asked (h2c) → 502, the connection closed', async (t) => {
  answers.set('/bare-101', (socket) => socket.write('HTTP/1.1 101 Switching Protocols\r\n\r\n'));
  answers.set('/h2c-101', (socket) => socket.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n'));
  for (const target of ['/bare-101', '/h2c-101']) {
    const answer = await exchange(upgradeRequest(HOSTNAME, target));
    const head = headOf(answer.text);
    t.same(statusLines(answer.text), ['HTTP/1.1 502'], `${target}: one answer, 502`);
    t.equal(Buffer.byteLength(head.body, 'latin1'), Number(values(head.fields, 'content-length')[0]), `${target}: framed by its Content-Length`);
    t.same(values(head.fields, 'connection'), ['close']);
    t.ok(answer.closedByServer, `${target}: and the connection is closed`);
    t.match(await accessLine(target), { status: 502, route: 'project' });
  }
});

t.test('interim (1xx) answers before the 101: up to 32 are skipped, more is a flood → 502', async (t) => {
  const hints = (n: number) => 'HTTP/1.1 103 Early Hints\r\nLink: </app.js>; rel=preload\r\n\r\n'.repeat(n);
  const switched = `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: ${acceptOf(KEY)}\r\n\r\n`;
  answers.set('/hints-32', (socket) => socket.write(hints(32) + switched));
  answers.set('/hints-33', (socket) => socket.write(hints(33) + switched));
  const allowed = await exchange(upgradeRequest(HOSTNAME, '/hints-32'), HOSTNAME, 500);
  t.same(statusLines(allowed.text), ['HTTP/1.1 101'], '32 hints: skipped, then the switch');
  const flood = await exchange(upgradeRequest(HOSTNAME, '/hints-33'));
  t.same(statusLines(flood.text), ['HTTP/1.1 502'], '33 hints: one answer, 502');
  t.ok(flood.closedByServer, 'and the connection is closed');
  t.match(await accessLine('/hints-33'), { status: 502, route: 'project' });
});

t.test('refusals are framed by Portico and say Connection: close, as the connection closes after them', async (t) => {
  answers.set('/refuse-keep-alive', (socket) => socket.write('HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n'));
  answers.set('/refuse-named', (socket) => socket.write('HTTP/1.1 403 Forbidden\r\nConnection: X-Hop\r\nX-Hop: 1\r\nContent-Length: 5\r\nX-End: 2\r\n\r\nnope!'));
  answers.set('/refuse-to-close', (socket) => socket.end('HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\r\nno key'));
  const keepAlive = headOf((await exchange(upgradeRequest(HOSTNAME, '/refuse-keep-alive'))).text);
  t.equal(keepAlive.status, 426);
  t.same(values(keepAlive.fields, 'connection'), ['close'], 'not the upstream\'s keep-alive');
  t.same(values(keepAlive.fields, 'keep-alive'), []);
  t.same(values(keepAlive.fields, 'content-length'), ['0']);

  const named = headOf((await exchange(upgradeRequest(HOSTNAME, '/refuse-named'))).text);
  t.equal(named.status, 403);
  t.same(values(named.fields, 'connection'), ['close'], 'no Connection: Upgrade on a refusal');
  t.same(values(named.fields, 'x-hop'), [], 'a field the upstream named in Connection stays on its hop');
  t.same(values(named.fields, 'x-end'), ['2']);
  t.same(values(named.fields, 'content-length'), ['5']);
  t.equal(named.body, 'nope!');

  const toClose = await exchange(upgradeRequest(HOSTNAME, '/refuse-to-close'));
  const head = headOf(toClose.text);
  t.equal(head.status, 400);
  t.same(values(head.fields, 'connection'), ['close']);
  t.same(values(head.fields, 'transfer-encoding'), ['chunked'], 'a body read to the upstream\'s close goes out chunked');
  t.equal(head.body, '6\r\nno key\r\n0\r\n\r\n', 'and ends as a whole one');
  t.ok(toClose.closedByServer);
});

t.test(`a refusal whose body goes silent is cut after upstreamMs (${UPSTREAM_MS} ms), with its upstream connection`, async (t) => {
  let upstreamSocket: net.Socket | undefined;
  answers.set('/refuse-silent', (socket) => {
    upstreamSocket = socket;
    socket.write('HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n\r\npartial');
  });
  const answer = await exchange(upgradeRequest(HOSTNAME, '/refuse-silent'));
  t.ok(answer.closedByServer, `closed by Portico (after ${answer.ms} ms)`);
  t.ok(answer.ms >= UPSTREAM_MS - 50 && answer.ms < UPSTREAM_MS + 1500, `after about upstreamMs (${answer.ms} ms)`);
  t.same(statusLines(answer.text), ['HTTP/1.1 403'], 'the upstream\'s head only');
  t.notMatch(headOf(answer.text).body, /0\r\n\r\n$/, 'the cut body is not ended as if it were whole');
  for (let i = 0; i < 20 && !upstreamSocket!.destroyed; i++) await sleep(50);
  t.ok(upstreamSocket!.destroyed, 'the upstream connection is closed too');
  t.match(await accessLine('/refuse-silent'), { status: 504, aborted: true });
});

t.test('upgrades to other hosts are routed as any request: 421, the API, a redirect, 404 — each framed, Connection: close', async (t) => {
  t.equal(verified.json.status, 'verified', 'the redirect domain is verified');
  t.equal(redirect.status, 201, 'and redirects');

  const misdirected = await exchange(upgradeRequest('api.localhost', '/misdirected'), HOSTNAME);
  const misdirectedHead = headOf(misdirected.text);
  t.equal(misdirectedHead.status, 421, 'Host naming another site than the SNI → 421, also when it is no project');
  t.equal(JSON.parse(misdirectedHead.body).code, 'misdirected_request');

  const api = headOf((await exchange(upgradeRequest('api.localhost', '/v1/categories'), 'api.localhost')).text);
  t.equal(api.status, 401, 'the API answers as it would the same GET: no key → 401');
  t.same(JSON.parse(api.body), { code: 'unauthorized', message: JSON.parse(api.body).message, status: 401 });
  t.same(values(api.fields, 'www-authenticate').length, 1);

  const apiOther = headOf((await exchange(upgradeRequest('api.localhost', '/socket'), 'api.localhost')).text);
  t.equal(apiOther.status, 404);
  t.equal(JSON.parse(apiOther.body).code, 'not_found', 'outside /v1: the API\'s 404 Error');

  const moved = headOf((await exchange(upgradeRequest('www.chat.example', '/ws?room=1'), 'www.chat.example')).text);
  t.equal(moved.status, 308, 'a redirect domain answers its redirect');
  t.same(values(moved.fields, 'location'), [`https://${HOSTNAME}/ws?room=1`]);

  const unknown = headOf((await exchange(upgradeRequest('nowhere.localhost', '/nowhere'), 'nowhere.localhost')).text);
  t.equal(unknown.status, 404);
  t.match(values(unknown.fields, 'content-type')[0], /^text\/html/, 'the 404 page');

  for (const [name, head] of [['421', misdirectedHead], ['api', api], ['api 404', apiOther], ['redirect', moved], ['404', unknown]] as const) {
    t.same(values(head.fields, 'connection'), ['close'], `${name}: Connection: close`);
    t.equal(Buffer.byteLength(head.body, 'latin1'), Number(values(head.fields, 'content-length')[0]), `${name}: framed by its Content-Length`);
  }
  t.match(await accessLine('/misdirected'), { status: 421, route: 'unknown' });
  t.match(await accessLine('/v1/categories'), { status: 401, route: 'api' });
  t.match(await accessLine('/nowhere'), { status: 404, route: 'unknown', hostname: 'nowhere.localhost' });
  t.match(await accessLine('/ws'), { status: 308, route: 'redirect', hostname: 'www.chat.example' });
});

t.test('an HTTP/1.0 request with Upgrade is answered as a plain request (RFC 9110 §7.8: a server ignores its Upgrade)', async (t) => {
  let seen = '';
  answers.set('/old-client', (socket, head) => {
    seen = head;
    socket.end('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nplain');
  });
  const answer = await exchange(upgradeRequest(HOSTNAME, '/old-client').replace('HTTP/1.1', 'HTTP/1.0'));
  const head = headOf(answer.text);
  t.equal(head.status, 200, "the upstream's answer to a plain GET");
  t.equal(head.body, 'plain');
  t.notMatch(seen, /^upgrade:/im, `the upstream got no Upgrade field (${JSON.stringify(seen)})`);
  t.ok(answer.closedByServer, 'the connection closes after it');
  t.match(await accessLine('/old-client'), { status: 200, route: 'project', protocol: '1.0' });
});

t.test('an upgrade refused before routing (two Host fields) gets the Error body and a count, as a request does', async (t) => {
  const before = await requests({ route: 'unknown', method: 'GET', status: '400' });
  const twoHosts = upgradeRequest(HOSTNAME, '/two-hosts').replace('\r\n\r\n', `\r\nHost: other.localhost\r\n\r\n`);
  const answer = await exchange(twoHosts, HOSTNAME, 2_000);
  const head = headOf(answer.text);
  t.equal(head.status, 400);
  t.equal(JSON.parse(head.body).code, 'invalid_request', 'with the Error body saying why');
  t.match(JSON.parse(head.body).message, /Host/);
  t.same(values(head.fields, 'connection'), ['close']);
  t.ok(answer.closedByServer, 'and the connection closes');
  t.equal(await requests({ route: 'unknown', method: 'GET', status: '400' }), before + 1, 'counted once, route unknown');
});

t.test('one count and one access line per upgrade, when it is over: a WebSocket\'s when it closes, with its lifetime', async (t) => {
  answers.set('/counted', (socket, head) => {
    const key = /sec-websocket-key: *(\S+)/i.exec(head)![1];
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${acceptOf(key)}\r\n\r\n`);
  });
  answers.set('/counted-refusal', (socket) => socket.write('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n'));
  const labels = (status: string) => ({ route: 'project', method: 'GET', status });
  const [opened, refused] = [await requests(labels('101')), await requests(labels('403'))];

  const ws = new WebSocket(`wss://127.0.0.1:${ports.https}/counted`, { servername: HOSTNAME, headers: { host: HOSTNAME }, ca, checkServerIdentity: () => undefined } as unknown as ClientOptions);
  ws.on('error', () => undefined);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  await sleep(400);
  t.equal(await requests(labels('101')), opened, 'not counted while it is open');
  t.same(accessLines('/counted'), [], 'no access line while it is open');
  ws.terminate();
  const line = await accessLine('/counted');
  t.match(line, { method: 'GET', hostname: HOSTNAME, route: 'project', status: 101, protocol: '1.1', clientIp: '127.0.0.1' });
  t.ok((line.durationMs as number) >= 400, `its duration is the WebSocket's lifetime (${line.durationMs} ms)`);
  t.equal(await requests(labels('101')), opened + 1, 'counted once, when it closed');

  await exchange(upgradeRequest(HOSTNAME, '/counted-refusal'));
  t.match(await accessLine('/counted-refusal'), { status: 403, route: 'project' });
  t.equal(await requests(labels('403')), refused + 1, 'a refusal is counted with its status');
});
