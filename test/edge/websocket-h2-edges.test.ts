// WebSockets over HTTP/2 (extended CONNECT, RFC 8441) at their edges, through the real edge (Portico
// in this process, TLS with SNI, Node's http2 client and raw frames) to a hand-made upstream:
// - a refusal whose body never ends no longer keeps its upstream connection (it stayed open for good);
// - rapid reset with extended CONNECT streams is held like rapid reset with GETs: before, each
//   cancelled CONNECT still opened an upstream connection (~180 per attacking connection against 2);
// - one access line and one count per extended CONNECT, with its final status and the route of its
//   hostname: before, none was written, refusals of non-project hosts were counted as `project`, and a
//   stream reset before its answer was not counted at all.
import t from 'tap';
import http2 from 'node:http2';
import net from 'node:net';
import { createHash } from 'node:crypto';
import { startPortico } from '../helpers/portico.ts';
import { admin, accountWithKey } from '../helpers/client.ts';
import { scrape } from '../helpers/prometheus.ts';
import { connectRaw, frame, literal, FRAME, FLAG } from '../helpers/h2-frames.ts';
import type { AccessEntry } from '../../src/log.ts';

const { NGHTTP2_CANCEL } = http2.constants;

// ---- the upstream: a raw TCP server, one request per connection (the bridge uses no pool) ----
interface UpstreamConnection {
  path: string;
  /** the request head as received, without its blank line */
  head: string;
  socket: net.Socket;
  closed: boolean;
}
const connections: UpstreamConnection[] = [];
// TCP connections accepted, those closed before a request head came included
let accepted = 0;
const upstream = net.createServer((socket) => {
  accepted++;
  socket.on('error', () => undefined);
  let head = '';
  const onData = (chunk: Buffer) => {
    head += chunk.toString('latin1');
    const end = head.indexOf('\r\n\r\n');
    if (end === -1) return;
    socket.off('data', onData);
    const path = head.split(' ')[1];
    const connection: UpstreamConnection = { path, head: head.slice(0, end), socket, closed: false };
    connections.push(connection);
    socket.once('close', () => (connection.closed = true));
    answer(path, head.slice(0, end), socket);
  };
  socket.on('data', onData);
});
function answer(path: string, head: string, socket: net.Socket): void {
  if (path.startsWith('/ws/held-refusal')) {
    // a refusal whose body never ends, on a connection the upstream keeps open
    socket.write('HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n\r\nnot finished');
  } else if (path.startsWith('/ws/refuse')) {
    socket.end('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
  } else if (path.startsWith('/ws/hints-')) {
    // n interim answers, then the switch
    const key = /^sec-websocket-key: *(\S+)/im.exec(head)?.[1] ?? '';
    const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
    const hints = 'HTTP/1.1 103 Early Hints\r\nLink: </app.js>; rel=preload\r\n\r\n'.repeat(Number(path.slice('/ws/hints-'.length)));
    socket.write(`${hints}HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
  } else if (path.startsWith('/ws/echo')) {
    // RFC 6455 §4.2.2: the accept for the key Portico made; then every byte comes back
    const key = /^sec-websocket-key: *(\S+)/im.exec(head)?.[1] ?? '';
    const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
    socket.on('data', (chunk) => socket.write(chunk));
    socket.once('end', () => socket.end());
  }
  // anything else (/ws/silent): no answer
}
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
t.teardown(async () => {
  for (const { socket } of connections) socket.destroy();
  await new Promise((resolve) => upstream.close(resolve));
});

// default timeouts: upstreamMs is 30 s, so nothing here is closed by the upstream timeout
const portico = await startPortico();
t.teardown(() => portico.stop());
const { ports, ca } = portico;
const owner = await accountWithKey(ports.admin, 'business');
const made = await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'edges', upstream: `http://127.0.0.1:${(upstream.address() as net.AddressInfo).port}` });
t.equal(made.status, 201, 'the project is created');
const HOSTNAME = 'edges.localhost';

function h2(servername = HOSTNAME): http2.ClientHttp2Session {
  const session = http2.connect(`https://127.0.0.1:${ports.https}`, { ca, servername, checkServerIdentity: () => undefined });
  session.on('error', () => undefined);
  return session;
}

function request(session: http2.ClientHttp2Session, headers: http2.OutgoingHttpHeaders) {
  const stream = session.request(headers);
  stream.on('error', () => undefined);
  const head = new Promise<http2.IncomingHttpHeaders>((resolve) => {
    stream.once('response', (h) => resolve(h));
    stream.once('close', () => resolve({}));
  });
  return { stream, head, status: head.then((h) => Number(h[':status'] ?? 0)) };
}

/** an answer's body, to its end */
async function body(stream: http2.ClientHttp2Stream): Promise<string> {
  let text = '';
  for await (const chunk of stream) text += chunk;
  return text;
}
const websocket = (session: http2.ClientHttp2Session, path: string, extra: http2.OutgoingHttpHeaders = {}) =>
  request(session, { ':method': 'CONNECT', ':protocol': 'websocket', ':scheme': 'https', ':path': path, ':authority': HOSTNAME, 'sec-websocket-version': '13', ...extra });

const until = async (what: string, check: () => boolean, ms = 5_000) => {
  for (const deadline = Date.now() + ms; !check(); ) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** a WebSocket's bytes come back through the upstream: the tunnel carries data both ways */
async function echoes(stream: http2.ClientHttp2Stream, text: string): Promise<boolean> {
  let got = '';
  const onData = (chunk: Buffer) => (got += chunk.toString());
  stream.on('data', onData);
  stream.write(text);
  try {
    await until(`the echo of ${text}`, () => got.includes(text));
    return true;
  } catch {
    return false;
  } finally {
    stream.off('data', onData);
  }
}

/** an access line as written (log.ts): the fields left undefined are not there */
type AccessLine = Omit<AccessEntry, 'method' | 'accountId'> & { method: string };
const connectLines = (): AccessLine[] =>
  portico.logs.filter((l) => l.includes('"msg":"request"') && l.includes('"method":"CONNECT"')).map((l) => JSON.parse(l) as AccessLine);

async function connectCounts(): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (const line of (await scrape(ports.admin)).split('\n')) {
    const m = /^portico_http_requests_total\{route="(\w+)",method="CONNECT",status="(\d+)"\} (\d+)/.exec(line);
    if (m) counts.set(`${m[1]} ${m[2]}`, Number(m[3]));
  }
  return counts;
}

t.test('a refusal whose body never ends: the upstream connection is closed once the status is sent', async (t) => {
  const session = h2();
  t.teardown(() => session.close());
  const before = connections.length;
  const streams = Array.from({ length: 5 }, (_, i) => websocket(session, `/ws/held-refusal/${i}`));
  t.same(await Promise.all(streams.map((s) => s.status)), [403, 403, 403, 403, 403], 'each stream is answered with the upstream\'s 403');
  await until('the upstream requests', () => connections.length === before + 5);
  const mine = connections.slice(before);
  // the old code kept all five open for good (the body never ends, and no timeout applied)
  await until('the upstream connections to close', () => mine.every((c) => c.closed), 3_000).catch(() => undefined);
  t.equal(mine.filter((c) => !c.closed).length, 0, 'no upstream connection is left open, while the visitor\'s h2 connection is still up');
  t.notOk(session.closed || session.destroyed, 'the visitor\'s connection stays usable');
  t.equal(await websocket(session, '/ws/refuse/after').status, 403, 'and answers its next WebSocket');
});

t.test('interim (1xx) answers before the 101: up to 32 are skipped, more is a flood → 502', async (t) => {
  const session = h2();
  t.teardown(() => session.destroy());
  t.equal(await websocket(session, '/ws/hints-32').status, 200, '32 hints: skipped, then the WebSocket opens');
  t.equal(await websocket(session, '/ws/hints-33').status, 502, '33 hints: 502');
});

t.test('rapid reset with extended CONNECT streams is held like rapid reset with GETs', async (t) => {
  // HEADERS (extended CONNECT, RFC 8441 §4) then RST_STREAM(CANCEL) at once, 50 pairs a write
  const raw = await connectRaw(ports.https, HOSTNAME, ca);
  const cancel = Buffer.alloc(4);
  cancel.writeUInt32BE(NGHTTP2_CANCEL);
  const withValue = (index: number, value: string) => Buffer.concat([Buffer.from([index, value.length]), Buffer.from(value)]);
  // :method CONNECT (name index 2), :scheme https (index 7), :path (4), :authority (1), then literals
  const block = Buffer.concat([withValue(2, 'CONNECT'), Buffer.from([0x87]), withValue(4, '/ws/echo/attack'), withValue(1, HOSTNAME), literal(':protocol', 'websocket'), literal('sec-websocket-version', '13')]);
  const before = connections.length;
  const acceptedBefore = accepted;
  const started = performance.now();
  let streamId = 1;
  while (!raw.socket.destroyed && performance.now() - started < 5_000) {
    const pairs: Buffer[] = [];
    for (let i = 0; i < 50; i++, streamId += 2) pairs.push(frame(FRAME.HEADERS, FLAG.END_HEADERS, streamId, block), frame(FRAME.RST_STREAM, 0, streamId, cancel));
    raw.write(Buffer.concat(pairs));
    await new Promise((resolve) => setImmediate(resolve));
  }
  const { goaway } = await Promise.race([raw.closed, sleep(5_000).then(() => ({ goaway: -1 }))]);
  t.not(goaway, -1, `the attacking connection is closed (GOAWAY ${goaway}) after ${(streamId - 1) / 2} streams`);
  await sleep(300);
  const opened = accepted - acceptedBefore;
  // the same attack with GET streams: 2 (the first two cancels, before the others wait a turn); the old code: ~100–180
  t.ok(opened <= 5, `upstream connections opened by the attack: ${opened}`);
  t.equal(connections.slice(before).filter((c) => !c.closed).length, 0, 'none of them is left open');

  // a legitimate client whose first WebSockets were cancelled before their answer (its streams now
  // wait a turn) still opens one, and it carries data
  const session = h2();
  t.teardown(() => session.close());
  for (let i = 0; i < 3; i++) {
    const early = websocket(session, '/ws/silent/cancelled');
    await until('the upstream request', () => connections.some((c) => c.path === '/ws/silent/cancelled' && !c.closed));
    early.stream.close(NGHTTP2_CANCEL);
    await until('the upstream connection to close', () => connections.every((c) => c.path !== '/ws/silent/cancelled' || c.closed));
  }
  const ws = websocket(session, '/ws/echo/after-cancels');
  t.equal(await ws.status, 200, 'a WebSocket opens on a connection that cancelled streams before');
  t.ok(await echoes(ws.stream, 'still fine'), 'and carries data both ways');
  ws.stream.close(NGHTTP2_CANCEL);
});

t.test('an extended CONNECT carrying content-length goes up without it: the upstream waits for no body', async (t) => {
  const session = h2();
  t.teardown(() => session.close());
  const ws = websocket(session, '/ws/echo/with-length', { 'content-length': '32' });
  t.equal(await ws.status, 200, 'the WebSocket opens');
  const up = connections.find((c) => c.path === '/ws/echo/with-length');
  t.ok(up, 'the upstream got the upgrade');
  t.notMatch(up?.head ?? '', /^content-length:/im, 'without the visitor\'s content-length');
  t.ok(await echoes(ws.stream, 'after the length'), 'and the tunnel carries data');
  ws.stream.close(NGHTTP2_CANCEL);
});

t.test('one access line and one count per extended CONNECT, with its final status and route', async (t) => {
  const countsBefore = await connectCounts();
  const linesBefore = connectLines().length;
  const session = h2();
  t.teardown(() => session.close());

  // an open WebSocket: its line is written when it closes, with its whole lifetime
  const ws = websocket(session, '/ws/echo/lifetime?room=1');
  t.equal(await ws.status, 200, 'the WebSocket opens');
  const opened = performance.now();
  t.ok(await echoes(ws.stream, 'hello'), 'and carries data');
  await sleep(1_000);
  t.notOk(connectLines().some((l) => l.path === '/ws/echo/lifetime'), 'no line while the WebSocket is open');
  ws.stream.end();
  await new Promise((resolve) => ws.stream.once('close', resolve));
  const lifetime = performance.now() - opened;

  // refusals, by Portico or by the upstream, and a visitor that leaves before the answer
  t.equal(await websocket(session, '/ws/refuse/upstream').status, 403, 'the upstream refuses → 403');
  t.equal(await websocket(session, '/ws/chat', { ':protocol': 'chat' }).status, 501, 'another :protocol → 501');
  const plainConnect = request(session, { ':method': 'CONNECT', ':authority': `${HOSTNAME}:443` });
  t.equal(await plainConnect.status, 405, 'a plain CONNECT → 405');
  t.equal((await plainConnect.head).allow, '', 'with Allow (empty: no method serves a host:port target), as over HTTP/1.1');
  t.equal(await websocket(session, '/ws/misdirected', { ':authority': 'nobody.localhost' }).status, 421, 'another name than the SNI → 421');
  t.equal(await websocket(session, '/ws/two-sites', { host: 'other.localhost' }).status, 400, 'a Host field naming another site → 400');
  const apiSession = h2('api.localhost');
  t.teardown(() => apiSession.close());
  const api = websocket(apiSession, '/v1/categories', { ':authority': 'api.localhost' });
  t.equal(await api.status, 401, 'the API host → its own answer: 401 without a key');
  t.match(JSON.parse(await body(api.stream)), { code: 'unauthorized' }, 'with its Error body');
  t.ok((await api.head)['x-ratelimit-limit'], 'and its rate limit headers, as every /v1 answer');
  const unknownSession = h2('nobody.localhost');
  t.teardown(() => unknownSession.close());
  const unknown = websocket(unknownSession, '/ws/nobody', { ':authority': 'nobody.localhost' });
  t.equal(await unknown.status, 404, 'an unknown host → 404');
  t.match(await body(unknown.stream), /<html/i, 'the 404 page, as for any request to it');
  const left = websocket(session, '/ws/silent/left');
  await until('the upstream request', () => connections.some((c) => c.path === '/ws/silent/left'));
  left.stream.close(NGHTTP2_CANCEL);
  t.equal(await left.status, 0, 'a visitor that resets the stream before the upstream answers gets nothing');

  await until('nine access lines', () => connectLines().length >= linesBefore + 9).catch(() => undefined);
  await sleep(400);
  const lines = connectLines().slice(linesBefore);
  const shape = (l: AccessLine) => `${l.route} ${l.status} ${l.hostname} ${l.path}${l.aborted ? ' aborted' : ''}`;
  t.same(lines.map(shape).sort(), [
    `api 401 api.localhost /v1/categories`,
    `project 200 ${HOSTNAME} /ws/echo/lifetime`,
    `project 403 ${HOSTNAME} /ws/refuse/upstream`,
    `project 499 ${HOSTNAME} /ws/silent/left aborted`,
    `unknown 400 ${HOSTNAME} /ws/two-sites`,
    `unknown 404 nobody.localhost /ws/nobody`,
    `unknown 405 ${HOSTNAME} `,
    `unknown 421 nobody.localhost /ws/misdirected`,
    `unknown 501 ${HOSTNAME} /ws/chat`,
  ].sort(), 'one line per extended CONNECT: its route, final status, hostname and path (no query)');
  const tunnel = lines.find((l) => l.path === '/ws/echo/lifetime');
  t.ok(tunnel && tunnel.durationMs >= lifetime - 50, `the WebSocket's line covers its lifetime (${tunnel?.durationMs} ms, open ${Math.round(lifetime)} ms)`);
  t.ok(lines.every((l) => l.protocol === '2.0' && l.clientIp === '127.0.0.1'), 'protocol 2.0 and the client address on each');

  const countsAfter = await connectCounts();
  const delta = [...countsAfter].map(([labels, n]) => [labels, n - (countsBefore.get(labels) ?? 0)] as const).filter(([, n]) => n > 0);
  t.same(Object.fromEntries(delta), {
    'project 200': 1,
    'project 403': 1,
    'project 499': 1,
    'api 401': 1,
    'unknown 404': 1,
    'unknown 400': 1,
    'unknown 405': 1,
    'unknown 421': 1,
    'unknown 501': 1,
  }, 'portico_http_requests_total counts each once, with the route label of its hostname');
});
