// The project proxy behind a real TLS listener shaped like Portico's (one Http2SecureServer with
// allowHTTP1), in front of a real loopback upstream: headers, streaming, failures, pooling, aborted
// clients and WebSocket pass-through, over HTTP/1.1 and HTTP/2.
import t, { type Test } from 'tap';
import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import type { AddressInfo } from 'node:net';
import { WebSocket, type ClientOptions } from 'ws';
import { selfSigned } from '../../src/certs/fallback.ts';
import { createForwarder } from '../../src/proxy/forward.ts';
import { createProjectProxy, targetUrl, type ProxyContext } from '../../src/proxy/project-proxy.ts';
import { startUpstream, closedPort, downloadByte, type Upstream } from '../helpers/upstream.ts';

const MB = 1024 * 1024;
const HOSTNAME = 'shop.example.com';
const { key, cert } = await selfSigned(['localhost'], 1);
// ws passes these to tls.connect; its typings leave out `servername` (SNI, and the name checked)
const trust = { ca: cert, servername: 'localhost' } as ClientOptions;

const reported: string[] = [];
let reportedByForwarder = 0;
const forwarder = createForwarder(300, () => reportedByForwarder++);
const proxy = createProjectProxy(forwarder, { timeoutMs: 300, onError: (kind) => reported.push(kind) });
// for the abort tests: a 300 ms timeout would close the upstream sockets before the clients' aborts could
const patientForwarder = createForwarder(60_000);
const patient = createProjectProxy(patientForwarder, { timeoutMs: 60_000, onError: (kind) => reported.push(kind) });

/** where the listener sends traffic; each test points it at its own upstream */
const route = { upstream: '', proxy };
let upgradeEvents = 0;
let lastUpgradeSocket: net.Socket | null = null;
const context = (req: http.IncomingMessage | http2.Http2ServerRequest): ProxyContext => ({ clientIp: req.socket.remoteAddress ?? '', hostname: HOSTNAME, proto: 'https' });

const server = http2.createSecureServer({ allowHTTP1: true, key, cert });
server.on('request', (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => {
  route.proxy.web(req, res, route.upstream, context(req)).catch((err: unknown) => t.error(err));
});
server.on('upgrade', (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
  upgradeEvents++;
  lastUpgradeSocket = socket;
  route.proxy.upgrade(req, socket, head, route.upstream, context(req));
});
const edgeSockets = new Set<net.Socket>();
server.on('secureConnection', (socket: tls.TLSSocket) => {
  edgeSockets.add(socket);
  socket.once('close', () => edgeSockets.delete(socket));
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const port = (server.address() as AddressInfo).port;

const upstream = await startUpstream();
route.upstream = upstream.url;

t.teardown(async () => {
  await proxy.close();
  await forwarder.close();
  await patient.close();
  await patientForwarder.close();
  await upstream.stop();
  for (const socket of edgeSockets) socket.destroy();
  await new Promise((resolve) => server.close(resolve));
});

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

const echoed = (answer: Answer) => JSON.parse(answer.body.toString('utf8')) as { method: string; url: string; headers: Record<string, string>; body: string };

/** HTTP/1.1 over TLS, one connection per request unless an agent is given */
function h1(path: string, options: { method?: string; headers?: Record<string, string>; body?: string; agent?: https.Agent } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port, servername: 'localhost', ca: cert, path, method: options.method ?? 'GET', headers: { host: HOSTNAME, ...options.headers }, agent: options.agent ?? false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    if (options.headers?.expect) req.on('continue', () => req.end(options.body));
    else req.end(options.body);
  });
}

function h2session(): http2.ClientHttp2Session {
  return http2.connect(`https://127.0.0.1:${port}`, { ca: cert, servername: 'localhost' });
}

function h2(session: http2.ClientHttp2Session, headers: http2.OutgoingHttpHeaders, body?: string): Promise<Answer & { h2: http2.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':authority': HOSTNAME, ...headers });
    let response: http2.IncomingHttpHeaders & http2.IncomingHttpStatusHeader = {};
    const chunks: Buffer[] = [];
    stream.on('response', (h) => (response = h));
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('end', () => resolve({ status: Number(response[':status']), headers: response as http.IncomingHttpHeaders, h2: response, body: Buffer.concat(chunks) }));
    stream.on('error', reject);
    stream.end(body);
  });
}

async function until(check: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** `size` bytes of upload in 64 KiB chunks; stops after `pauseAt` bytes until `resume` resolves */
async function writeBody(stream: NodeJS.WritableStream, size: number, pauseAt: number, resume: () => Promise<void>): Promise<void> {
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  for (let sent = 0; sent < size; sent += chunk.length) {
    if (sent === pauseAt) await resume();
    if (!stream.write(chunk)) await new Promise((resolve) => stream.once('drain', resolve));
  }
  stream.end();
}

function checkDownload(t: Test, body: Buffer, size: number): void {
  t.equal(body.length, size, `${size} bytes arrived`);
  let wrong = 0;
  for (let i = 0; i < body.length; i++) if (body[i] !== downloadByte(i)) wrong++;
  t.equal(wrong, 0, 'every byte as the upstream sent it');
}

t.test('the target is the base path + the visitor path, which cannot climb out of it', async (t) => {
  t.equal(targetUrl('http://10.0.0.1:8080', '/a/b?x=1&y=%20').href, 'http://10.0.0.1:8080/a/b?x=1&y=%20');
  t.equal(targetUrl('http://10.0.0.1:8080/app/', '/a?q').href, 'http://10.0.0.1:8080/app/a?q');
  t.equal(targetUrl('http://10.0.0.1:8080/app', '/../../etc/passwd').href, 'http://10.0.0.1:8080/app/etc/passwd');
  t.equal(targetUrl('http://10.0.0.1:8080/app', '/%2e%2e/x').href, 'http://10.0.0.1:8080/app/x');
  t.equal(targetUrl('http://10.0.0.1:8080', '//evil.example/x').origin, 'http://10.0.0.1:8080', 'a path starting with // is not an authority');
  t.equal(targetUrl('http://10.0.0.1:8080', 'http://other.example/p?q=1').href, 'http://10.0.0.1:8080/p?q=1', 'absolute-form keeps only path and query');
  t.equal(targetUrl('http://10.0.0.1:8080', '*').href, 'http://10.0.0.1:8080/');
});

t.test('the HTTPS listener (Http2SecureServer, allowHTTP1) emits upgrade for an HTTP/1.1 WebSocket request', async (t) => {
  const before = upgradeEvents;
  const ws = new WebSocket(`wss://127.0.0.1:${port}/ws`, trust);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  t.equal(upgradeEvents, before + 1);
  ws.close();
  await new Promise((resolve) => ws.once('close', resolve));
});

t.test('GET over HTTP/1.1: forwarded headers set, client ones dropped, hop-by-hop stays on its hop', async (t) => {
  const answer = await h1('/echo?x=1', {
    headers: {
      'x-forwarded-for': '6.6.6.6',
      'x-forwarded-proto': 'http',
      'x-forwarded-host': 'evil.example',
      'x-forwarded-port': '1',
      forwarded: 'for=6.6.6.6;proto=http',
      'x-real-ip': '6.6.6.6',
      connection: 'keep-alive, X-Hop-Secret',
      'x-hop-secret': 'for the proxy only',
      'keep-alive': 'timeout=9',
      te: 'trailers',
      upgrade: 'h2c',
      'proxy-connection': 'keep-alive',
      'x-end-to-end': 'yes',
    },
  });
  t.equal(answer.status, 200);
  const seen = echoed(answer);
  t.equal(seen.url, '/echo?x=1');
  t.equal(seen.headers['x-forwarded-for'], '127.0.0.1', 'X-Forwarded-For is the client IP, not what the client sent');
  t.equal(seen.headers['x-forwarded-proto'], 'https');
  t.equal(seen.headers['x-forwarded-host'], HOSTNAME);
  t.equal(seen.headers.host, `127.0.0.1:${upstream.port}`, 'Host is the upstream host');
  t.equal(seen.headers['x-end-to-end'], 'yes');
  for (const name of ['forwarded', 'x-real-ip', 'x-forwarded-port', 'x-hop-secret', 'keep-alive', 'te', 'upgrade', 'proxy-connection']) {
    t.notOk(name in seen.headers, `${name} does not reach the upstream`);
  }
  t.notMatch(seen.headers.connection ?? '', /hop-secret/i, 'the Connection header is the proxy\'s own');
});

t.test('HTTP/1.1 response hop-by-hop headers stay on the upstream hop', async (t) => {
  const answer = await h1('/hop');
  t.equal(answer.status, 200);
  t.equal(answer.headers['x-end-to-end'], 'kept');
  t.notOk('x-upstream-hop' in answer.headers, 'a header the upstream named in Connection is dropped');
  t.notOk('proxy-connection' in answer.headers);
  t.notOk('upgrade' in answer.headers);
  t.notMatch(String(answer.headers.connection), /x-upstream-hop/i);
});

t.test('a POST with Expect: 100-continue is forwarded without the Expect header (Node\'s server answered it already)', async (t) => {
  const answer = await h1('/echo', { method: 'POST', headers: { expect: '100-continue', 'content-type': 'text/plain' }, body: 'hello' });
  t.equal(answer.status, 200);
  t.equal(echoed(answer).body, 'hello');
  t.notOk('expect' in echoed(answer).headers);
});

t.test('a request without Content-Length or Transfer-Encoding has no body upstream either (RFC 9112 §6.3), whatever its method', async (t) => {
  for (const method of ['OPTIONS', 'DELETE', 'POST']) {
    // raw: Node's own client would add a Content-Length or chunked framing to a POST
    const text = await new Promise<string>((resolve, reject) => {
      const socket = tls.connect({ host: '127.0.0.1', port, servername: 'localhost', ca: cert }, () => socket.write(`${method} /echo HTTP/1.1\r\nHost: ${HOSTNAME}\r\nConnection: close\r\n\r\n`));
      const chunks: Buffer[] = [];
      socket.on('data', (c: Buffer) => chunks.push(c)).on('end', () => resolve(Buffer.concat(chunks).toString('utf8'))).on('error', reject);
    });
    t.match(text, /^HTTP\/1\.1 200 /, `${method} answered`);
    const seen = JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4).replace(/^[0-9a-f]+\r\n/, '').replace(/\r\n0\r\n\r\n$/, ''));
    t.equal(seen.method, method);
    t.notOk('transfer-encoding' in seen.headers, `${method}: not sent chunked`);
    t.equal(seen.body, '', `${method}: no body`);
  }
  const session = h2session();
  t.teardown(() => session.close());
  const bodyless = await new Promise<Answer>((resolve, reject) => {
    const stream = session.request({ ':method': 'POST', ':path': '/echo', ':authority': HOSTNAME }, { endStream: true });
    const chunks: Buffer[] = [];
    stream.on('response', (headers) => stream.on('data', (c: Buffer) => chunks.push(c)).on('end', () => resolve({ status: Number(headers[':status']), headers: {}, body: Buffer.concat(chunks) })));
    stream.on('error', reject);
  });
  t.notOk('transfer-encoding' in echoed(bodyless).headers, 'HTTP/2: a POST that ended with its headers is not sent chunked');
});

t.test('GET over HTTP/2: no pseudo-headers upstream, forwarded headers set; response hop-by-hop headers dropped', async (t) => {
  const session = h2session();
  t.teardown(() => session.close());
  const answer = await h2(session, { ':path': '/echo?h2=1', 'x-forwarded-for': '6.6.6.6', forwarded: 'for=6.6.6.6', te: 'trailers', 'x-end-to-end': 'yes' });
  t.equal(answer.status, 200);
  const seen = echoed(answer);
  t.equal(seen.url, '/echo?h2=1');
  t.same(Object.keys(seen.headers).filter((name) => name.startsWith(':')), [], 'no pseudo-header reaches the upstream');
  t.equal(seen.headers.host, `127.0.0.1:${upstream.port}`);
  t.equal(seen.headers['x-forwarded-for'], '127.0.0.1');
  t.equal(seen.headers['x-forwarded-proto'], 'https');
  t.equal(seen.headers['x-forwarded-host'], HOSTNAME);
  t.notOk('te' in seen.headers);
  t.notOk('forwarded' in seen.headers);

  const hop = await h2(session, { ':path': '/hop' });
  t.equal(hop.status, 200, 'an upstream sending Connection/Keep-Alive/Upgrade still reaches an HTTP/2 client');
  t.equal(hop.h2['x-end-to-end'], 'kept');
  for (const name of ['connection', 'keep-alive', 'x-upstream-hop', 'proxy-connection', 'upgrade', 'transfer-encoding']) {
    t.notOk(name in hop.h2, `${name} does not reach the HTTP/2 client`);
  }
});

t.test('a 20 MB upload streams to the upstream (HTTP/1.1 with Content-Length, HTTP/2 without)', async (t) => {
  const target = await startUpstream();
  t.teardown(() => target.stop());
  route.upstream = target.url;
  t.teardown(() => void (route.upstream = upstream.url));
  // not a timeout test: the client's pause below can outlast 300 ms of silence when the machine is busy
  route.proxy = patient;
  t.teardown(() => void (route.proxy = proxy));
  const size = 20 * MB;
  // the client stops after 4 MB until the upstream has received bytes: a proxy that buffers the body
  // before forwarding would never let that happen
  const arrived = () => until(() => target.uploadedBytes > 0, 5000, 'the first uploaded bytes at the upstream');

  const answer = await new Promise<Answer>((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port, servername: 'localhost', ca: cert, path: '/upload', method: 'POST', agent: false, headers: { host: HOSTNAME, 'content-length': size } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c)).on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    writeBody(req, size, 4 * MB, arrived).catch(reject);
  });
  t.equal(answer.status, 200);
  t.same(JSON.parse(answer.body.toString()), { bytes: size }, 'the upstream counted every byte');

  const session = h2session();
  t.teardown(() => session.close());
  const stream = session.request({ ':method': 'POST', ':path': '/upload', ':authority': HOSTNAME });
  const done = new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c)).on('end', () => resolve(Buffer.concat(chunks))).on('error', reject);
  });
  const before = target.acceptedSockets;
  // uploadedBytes still holds the first upload's total until this request arrives and resets it
  await writeBody(stream, size, 4 * MB, () => until(() => target.uploadedBytes > 0 && target.uploadedBytes < size, 5000, 'the first HTTP/2 bytes at the upstream'));
  t.same(JSON.parse((await done).toString()), { bytes: size });
  t.ok(target.acceptedSockets - before <= 1, 'the pooled connection was reused or one opened');
});

t.test('a 20 MB download streams to the client (HTTP/1.1 and HTTP/2)', async (t) => {
  const size = 20 * MB;
  // the upstream sends one chunk and waits: only a streaming proxy lets the client see it
  const body = await new Promise<Buffer>((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port, servername: 'localhost', ca: cert, path: `/download?bytes=${size}&gate=1`, agent: false, headers: { host: HOSTNAME } }, (res) => {
      const chunks: Buffer[] = [];
      res.once('data', () => upstream.openGate());
      res.on('data', (c: Buffer) => chunks.push(c)).on('end', () => resolve(Buffer.concat(chunks))).on('error', reject);
    });
    req.on('error', reject).end();
  });
  checkDownload(t, body, size);

  const session = h2session();
  t.teardown(() => session.close());
  const stream = session.request({ ':path': `/download?bytes=${size}&gate=1`, ':authority': HOSTNAME });
  const chunks: Buffer[] = [];
  stream.once('data', () => upstream.openGate());
  stream.on('data', (c: Buffer) => chunks.push(c));
  await new Promise((resolve, reject) => stream.on('end', resolve).on('error', reject));
  checkDownload(t, Buffer.concat(chunks), size);
});

t.test('upstream refused → 502 page', async (t) => {
  route.upstream = `http://127.0.0.1:${await closedPort()}`;
  t.teardown(() => void (route.upstream = upstream.url));
  reported.length = 0;
  const answer = await h1('/anything');
  t.equal(answer.status, 502);
  t.match(answer.headers['content-type'], /text\/html/);
  t.match(answer.body.toString(), /could not be reached/);
  t.match(answer.body.toString(), HOSTNAME);
  t.same(reported, ['connect']);

  const session = h2session();
  t.teardown(() => session.close());
  t.equal((await h2(session, { ':path': '/' })).status, 502, 'over HTTP/2 too');
});

t.test('upstream silent past timeoutMs → 504 page', async (t) => {
  reported.length = 0;
  const started = Date.now();
  const answer = await h1('/slow?ms=3000');
  t.equal(answer.status, 504);
  t.match(answer.body.toString(), /did not answer in time/);
  t.ok(Date.now() - started < 1500, `answered after ${Date.now() - started} ms`);
  t.same(reported, ['timeout']);
  await until(() => upstream.openSockets <= 1, 2000, 'the timed-out upstream request to close').catch(() => undefined);
});

t.test('upstream resets the connection → 502 page', async (t) => {
  reported.length = 0;
  const answer = await h1('/reset');
  t.equal(answer.status, 502);
  t.same(reported, ['reset']);
});

t.test('keep-alive pool: 20 sequential requests use at most 2 upstream connections', async (t) => {
  const target = await startUpstream();
  t.teardown(() => target.stop());
  route.upstream = target.url;
  t.teardown(() => void (route.upstream = upstream.url));
  for (let i = 0; i < 20; i++) t.equal((await h1(`/echo?i=${i}`)).status, 200);
  t.ok(target.acceptedSockets <= 2, `${target.acceptedSockets} upstream connection(s)`);
  t.comment(`20 requests over ${target.acceptedSockets} upstream connection(s)`);
});

t.test('30 HTTP/1.1 clients abort after 50 ms: no upstream socket stays open', async (t) => {
  const target = await startUpstream();
  t.teardown(() => target.stop());
  route.upstream = target.url;
  route.proxy = patient;
  t.teardown(() => void Object.assign(route, { upstream: upstream.url, proxy }));
  reported.length = 0;
  // 30 TLS handshakes in one process can take longer than 50 ms: the clock starts once every
  // request is waiting at the upstream, so each abort really cuts a request in flight
  const requests = Array.from({ length: 30 }, () => https.request({ host: '127.0.0.1', port, servername: 'localhost', ca: cert, path: '/slow?ms=10000', agent: false, headers: { host: HOSTNAME } }));
  const closed = requests.map((req) => new Promise((resolve) => req.on('error', resolve).on('close', resolve).end()));
  await until(() => target.acceptedSockets === 30, 5000, '30 requests at the upstream');
  await new Promise((resolve) => setTimeout(resolve, 50));
  for (const req of requests) req.destroy();
  await Promise.all(closed);
  const aborted = Date.now();
  t.comment(`upstream sockets opened by the 30 requests: ${target.acceptedSockets}; open when the clients had gone: ${target.openSockets}`);
  await target.drained(500);
  t.comment(`0 open ${Date.now() - aborted} ms later`);
  t.equal(target.acceptedSockets, 30, 'one upstream socket per request in flight');
  t.equal(target.openSockets, 0, 'all closed');
  t.same(reported, [], 'a visitor leaving is not an upstream error');
});

t.test('30 HTTP/2 streams cancelled after 50 ms: no upstream socket stays open', async (t) => {
  const target = await startUpstream();
  t.teardown(() => target.stop());
  route.upstream = target.url;
  route.proxy = patient;
  t.teardown(() => void Object.assign(route, { upstream: upstream.url, proxy }));
  reported.length = 0;
  const session = h2session();
  t.teardown(() => session.close());
  const streams = Array.from({ length: 30 }, () => session.request({ ':path': '/slow?ms=10000', ':authority': HOSTNAME }).on('error', () => undefined));
  const closed = streams.map((stream) => new Promise((resolve) => stream.on('close', resolve).end()));
  await until(() => target.acceptedSockets === 30, 5000, '30 requests at the upstream');
  await new Promise((resolve) => setTimeout(resolve, 50));
  for (const stream of streams) stream.close(http2.constants.NGHTTP2_CANCEL);
  await Promise.all(closed);
  const cancelled = Date.now();
  t.comment(`upstream sockets opened by the 30 streams: ${target.acceptedSockets}; open when the streams had closed: ${target.openSockets}`);
  await target.drained(500);
  t.comment(`0 open ${Date.now() - cancelled} ms later`);
  t.equal(target.acceptedSockets, 30);
  t.equal(target.openSockets, 0, 'all closed');
  t.same(reported, [], 'a visitor leaving is not an upstream error');
});

t.test('WebSocket echo through the proxy over TLS; closing the client closes the upstream socket', async (t) => {
  const target = await startUpstream();
  t.teardown(() => target.stop());
  route.upstream = `${target.url}/`;
  t.teardown(() => void (route.upstream = upstream.url));
  reported.length = 0;
  const ws = new WebSocket(`wss://127.0.0.1:${port}/ws?room=1`, {
    ...trust,
    headers: { host: HOSTNAME, 'x-forwarded-for': '6.6.6.6', forwarded: 'for=6.6.6.6', 'keep-alive': 'timeout=5', 'x-end-to-end': 'yes' },
  });
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  ws.send('hello through portico');
  const [message] = await new Promise<[Buffer]>((resolve) => ws.once('message', (data: Buffer) => resolve([data])));
  t.equal(message.toString(), 'hello through portico');
  ws.send(Buffer.from([0, 1, 2, 255]));
  const [binary] = await new Promise<[Buffer]>((resolve) => ws.once('message', (data: Buffer) => resolve([data])));
  t.same([...binary], [0, 1, 2, 255], 'binary frames too');

  const seen = target.wsRequests[0];
  t.equal(seen['x-forwarded-for'], '127.0.0.1');
  t.equal(seen['x-forwarded-proto'], 'https');
  t.equal(seen['x-forwarded-host'], HOSTNAME);
  t.equal(seen.host, `127.0.0.1:${target.port}`);
  t.equal(seen['x-end-to-end'], 'yes');
  t.notOk('forwarded' in seen);
  t.notOk('keep-alive' in seen);
  t.match(seen.connection, /upgrade/i);
  t.equal(seen.upgrade, 'websocket');
  t.equal(target.openSockets, 1, 'one upstream socket while open');

  ws.close();
  await new Promise((resolve) => ws.once('close', resolve));
  await target.drained(2000);
  t.equal(target.openSockets, 0, 'the upstream socket closed with the client');
  t.same(reported, []);
});

t.test('the upstream ending a WebSocket ends the client connection', async (t) => {
  const target = await startUpstream();
  t.teardown(() => target.stop());
  route.upstream = target.url;
  t.teardown(() => void (route.upstream = upstream.url));
  const ws = new WebSocket(`wss://127.0.0.1:${port}/ws`, trust);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  const closed = new Promise((resolve) => ws.once('close', resolve));
  await target.stop();
  await closed;
  t.pass('client closed');
});

/** an HTTP/1.1 upgrade request over raw TLS; resolves with everything read until the proxy closes */
function rawUpgrade(path: string, upgrade = 'websocket', abortAfterMs?: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, servername: 'localhost', ca: cert, ALPNProtocols: ['http/1.1'] }, () => {
      socket.write(`GET ${path} HTTP/1.1\r\nHost: ${HOSTNAME}\r\nConnection: Upgrade\r\nUpgrade: ${upgrade}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`);
      if (abortAfterMs !== undefined) setTimeout(() => socket.destroy(), abortAfterMs);
    });
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('error', reject);
    socket.on('close', () => resolve(text));
  });
}

t.test('WebSocket to a dead upstream → 502 and the socket is closed', async (t) => {
  route.upstream = `http://127.0.0.1:${await closedPort()}`;
  t.teardown(() => void (route.upstream = upstream.url));
  reported.length = 0;
  const text = await rawUpgrade('/ws');
  t.match(text, /^HTTP\/1\.1 502 Bad Gateway\r\n/);
  t.same(reported, ['websocket']);

  const ws = new WebSocket(`wss://127.0.0.1:${port}/ws`, trust);
  const [status, closed] = await new Promise<[number, Promise<unknown>]>((resolve) => ws.once('unexpected-response', (_req, res) => {
    res.resume();
    resolve([res.statusCode!, new Promise((closed) => res.socket.once('close', closed))]);
  }));
  t.equal(status, 502, 'a ws client sees 502');
  await closed;
  t.pass('and the proxy closes the connection');
});

/** a TCP upstream that accepts and never answers, counting its sockets */
async function silentUpstream(): Promise<{ url: string; open: () => number; stop(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const silent = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.once('close', () => sockets.delete(socket));
    socket.resume(); // read (and drop) the request, or the peer's FIN would never be noticed
  });
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`,
    open: () => sockets.size,
    stop: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => silent.close(resolve));
    },
  };
}

t.test('WebSocket upstream silent past timeoutMs → 504, and its socket is closed', async (t) => {
  const silent = await silentUpstream();
  t.teardown(() => silent.stop());
  route.upstream = silent.url;
  t.teardown(() => void (route.upstream = upstream.url));
  reported.length = 0;
  const text = await rawUpgrade('/ws');
  t.match(text, /^HTTP\/1\.1 504 Gateway Timeout\r\n/);
  t.same(reported, ['websocket']);
  await until(() => silent.open() === 0, 2000, 'the silent upstream socket to close');
});

t.test('a WebSocket client leaving before the upgrade closes the upstream socket', async (t) => {
  const silent = await silentUpstream();
  t.teardown(() => silent.stop());
  route.upstream = silent.url;
  route.proxy = patient;
  t.teardown(() => void Object.assign(route, { upstream: upstream.url, proxy }));
  reported.length = 0;
  await Promise.all(Array.from({ length: 10 }, () => rawUpgrade('/ws', 'websocket', 50)));
  await until(() => silent.open() === 0, 500, 'the upstream sockets of the departed clients to close');
  t.same(reported, [], 'a visitor leaving is not an upstream error');
});

/**
 * A WebSocket upstream that answers 101 and then ignores the FIN it gets (half-open); it writes a
 * byte every 20 ms, so it notices (ECONNRESET) only once the proxy has really closed its socket.
 * With `end`, it ends its side right after the 101 instead.
 */
async function halfOpenUpstream(options: { end: boolean }): Promise<{ url: string; open: () => number; stop(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const upstream = net.createServer({ allowHalfOpen: true }, (socket) => {
    sockets.add(socket);
    socket.on('error', () => socket.destroy());
    socket.once('close', () => sockets.delete(socket));
    let request = '';
    socket.on('data', (chunk: Buffer) => {
      request += chunk.toString('latin1');
      if (!request.includes('\r\n\r\n') || request === 'done') return;
      request = 'done';
      socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n');
      if (options.end) socket.end();
      else {
        const ticker = setInterval(() => socket.write('.'), 20);
        socket.once('close', () => clearInterval(ticker));
      }
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
    open: () => sockets.size,
    stop: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => upstream.close(resolve));
    },
  };
}

/** raw TLS upgrade that resolves once the 101 is in, with the socket still open */
function openTunnel(path: string, allowHalfOpen = false): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    // tls.connect honours allowHalfOpen (passed on to its net.Socket); the typings leave it out
    const socket = tls.connect({ host: '127.0.0.1', port, servername: 'localhost', ca: cert, allowHalfOpen } as tls.ConnectionOptions, () => {
      socket.write(`GET ${path} HTTP/1.1\r\nHost: ${HOSTNAME}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`);
    });
    socket.on('error', reject);
    socket.once('data', (chunk: Buffer) => (chunk.toString('latin1').startsWith('HTTP/1.1 101') ? resolve(socket) : reject(new Error(chunk.toString('latin1')))));
  });
}

t.test('a WebSocket client leaving closes the upstream socket even when the upstream ignores the FIN', async (t) => {
  const target = await halfOpenUpstream({ end: false });
  t.teardown(() => target.stop());
  route.upstream = target.url;
  t.teardown(() => void (route.upstream = upstream.url));
  const tunnel = await openTunnel('/ws');
  t.equal(target.open(), 1);
  tunnel.destroy();
  await until(() => target.open() === 0, 1000, 'the proxy to close its upstream socket');
  t.pass('closed');
});

t.test('the upstream ending a WebSocket closes the client socket even when the client ignores the FIN', async (t) => {
  const target = await halfOpenUpstream({ end: true });
  t.teardown(() => target.stop());
  route.upstream = target.url;
  t.teardown(() => void (route.upstream = upstream.url));
  const tunnel = await openTunnel('/ws', true);
  t.teardown(() => tunnel.destroy());
  const edgeSide = lastUpgradeSocket!;
  if (!edgeSide.destroyed) await until(() => edgeSide.destroyed, 1000, 'the proxy to close the client socket');
  t.ok(edgeSide.destroyed, 'the listener\'s socket is closed');
});

t.test('close() ends the WebSocket tunnels still open', async (t) => {
  const target = await startUpstream();
  t.teardown(() => target.stop());
  const closing = createProjectProxy(forwarder, { timeoutMs: 300, onError: (kind) => reported.push(kind) });
  route.upstream = target.url;
  route.proxy = closing;
  t.teardown(() => void Object.assign(route, { upstream: upstream.url, proxy }));
  const ws = new WebSocket(`wss://127.0.0.1:${port}/ws`, trust);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  const closed = new Promise((resolve) => ws.once('close', resolve));
  await closing.close();
  await closed;
  await target.drained(1000);
  t.equal(target.openSockets, 0);
});

t.test('an Upgrade other than WebSocket → 400', async (t) => {
  const text = await rawUpgrade('/', 'h2c');
  t.match(text, /^HTTP\/1\.1 400 Bad Request\r\n/);
});

t.test('the forwarder\'s own onError is not called for project traffic (counted once, via the proxy)', async (t) => {
  t.equal(reportedByForwarder, 0);
});
