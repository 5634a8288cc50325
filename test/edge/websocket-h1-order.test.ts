// An HTTP/1.1 Upgrade pipelined behind a request still being answered: Node hands the connection over
// as soon as the Upgrade's head is read, and Portico wrote the 101 at once, so the visitor read the 101
// first and the earlier answer inside the WebSocket's bytes; a refusal in its place (the upstream's,
// Portico's own before routing, a CONNECT's 405) closed the connection, losing both answers. Answers
// go in request order (RFC 9112 §9.3.2), and the upgrade reaches the upstream only once the earlier
// answers are out. Also: the upstream's field bytes above 0x7F in a 101 or a refusal reached the
// visitor re-encoded as UTF-8.
// A real Portico over TLS with SNI, a raw TCP upstream; the bytes the visitor reads, in order.
import t from 'tap';
import net from 'node:net';
import tls from 'node:tls';
import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { startPortico, cleanup } from '../helpers/portico.ts';
import { admin, accountWithKey } from '../helpers/client.ts';

const SLOW_MS = 600;
const KEY = 'dGhlIHNhbXBsZSBub25jZQ==';
const ACCEPT = createHash('sha1').update(`${KEY}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// the upstream: what each path answers, and what it saw, in order
const events: string[] = [];
const answers: Record<string, (socket: net.Socket) => void> = {
  '/slow': (socket) =>
    setTimeout(() => {
      events.push('/slow answered');
      socket.write('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nslow answer');
    }, SLOW_MS),
  '/ws': (socket) => {
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${ACCEPT}\r\n\r\n`);
    // from here the bytes are the tunnel's: echoed as they come
    socket.removeAllListeners('data');
    socket.on('data', (chunk: Buffer) => socket.write(chunk));
  },
  '/refused': (socket) => socket.write('HTTP/1.1 302 Found\r\nLocation: /login\r\nContent-Length: 9\r\n\r\ngo log in'),
  '/latin101': (socket) => socket.write(Buffer.from(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${ACCEPT}\r\nX-Name: caf\xe9\r\n\r\n`, 'latin1')),
  '/latin403': (socket) => socket.write(Buffer.from('HTTP/1.1 403 Forbidden\r\nX-Name: caf\xe9\r\nContent-Length: 0\r\n\r\n', 'latin1')),
};
const upstreamSockets = new Set<net.Socket>();
const upstream = net.createServer((socket) => {
  upstreamSockets.add(socket);
  socket.on('error', () => undefined);
  socket.once('close', () => upstreamSockets.delete(socket));
  let buffered = '';
  socket.on('data', (chunk: Buffer) => {
    buffered += chunk.toString('latin1');
    for (let end = buffered.indexOf('\r\n\r\n'); end !== -1; end = buffered.indexOf('\r\n\r\n')) {
      const path = buffered.slice(0, end).split(' ')[1];
      buffered = buffered.slice(end + 4);
      events.push(path);
      (answers[path] ?? ((s: net.Socket) => s.end('HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n')))(socket);
    }
  });
});
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
t.teardown(async () => {
  for (const socket of upstreamSockets) socket.destroy();
  await new Promise((resolve) => upstream.close(resolve));
});

const portico = await startPortico();
let stopped = false;
t.teardown(async () => {
  if (!stopped) await portico.stop();
  cleanup(portico.dataDir, portico.certsDir);
});
const { ports, ca } = portico;
const owner = await accountWithKey(ports.admin);
const HOSTNAME: string = (await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'order', upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` })).json.defaultDomain;

const get = (path: string) => `GET ${path} HTTP/1.1\r\nHost: ${HOSTNAME}\r\n\r\n`;
const upgrade = (path: string, extra = '') =>
  `GET ${path} HTTP/1.1\r\nHost: ${HOSTNAME}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${KEY}\r\n${extra}\r\n`;
// a masked client text frame "hi" (RFC 6455 §5.2)
const FRAME = Buffer.from([0x81, 0x82, 1, 2, 3, 4, 0x68 ^ 1, 0x69 ^ 2]);

interface Visit {
  /** every byte read, as latin1 */
  text: string;
  closedByServer: boolean;
}

/**
 * One TLS connection (ALPN http/1.1, SNI the project's hostname) that writes `bytes` in one go and reads
 * until the server closes it or `keepMs` passes; `then` may act on what has been read so far.
 */
function visit(bytes: string, keepMs: number, then?: (socket: tls.TLSSocket, text: () => string) => void): Promise<Visit> {
  return new Promise((resolve, reject) => {
    let text = '';
    let byGuard = false;
    const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: HOSTNAME, ca, checkServerIdentity: () => undefined, ALPNProtocols: ['http/1.1'] }, () => socket.write(bytes));
    const guard = setTimeout(() => {
      byGuard = true;
      socket.destroy();
    }, keepMs);
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
    socket.on('error', reject);
    socket.on('close', () => {
      clearTimeout(guard);
      resolve({ text, closedByServer: !byGuard });
    });
    then?.(socket, () => text);
  });
}

interface Answer {
  status: number;
  fields: Array<[string, string]>;
  body: string;
}

/** the answers in `text`, in order, bodies by their Content-Length; after a 101, `rest` is the tunnel's bytes */
function answersIn(text: string): { answers: Answer[]; rest: string } {
  const found: Answer[] = [];
  let rest = text;
  while (rest.startsWith('HTTP/1.1 ')) {
    const end = rest.indexOf('\r\n\r\n');
    if (end === -1) break;
    const [statusLine, ...lines] = rest.slice(0, end).split('\r\n');
    const fields = lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()] as [string, string]);
    const status = Number(statusLine.split(' ')[1]);
    const length = status === 101 ? 0 : Number(fields.find(([name]) => name === 'content-length')?.[1] ?? 0);
    found.push({ status, fields, body: rest.slice(end + 4, end + 4 + length) });
    rest = rest.slice(end + 4 + length);
    if (status === 101) break;
  }
  return { answers: found, rest };
}
/** `then` once the upstream has the GET: by then Portico has read the Upgrade written with it */
function onceUpstreamHasSlow(then: () => void): void {
  const poll = setInterval(() => {
    if (!events.includes('/slow')) return;
    clearInterval(poll);
    then();
  }, 10);
}

/** once a 101's head has been read, one frame into the tunnel; once its echo is back, the visitor ends */
function frameThrough(socket: tls.TLSSocket, text: () => string): void {
  let sent = false;
  const poll = setInterval(() => {
    const read = text();
    const at = read.indexOf('HTTP/1.1 101');
    if (!sent && at !== -1 && read.indexOf('\r\n\r\n', at) !== -1) {
      sent = true;
      socket.write(FRAME);
    }
    if (sent && read.endsWith(FRAME.toString('latin1'))) {
      clearInterval(poll);
      socket.end();
    }
  }, 20);
  socket.once('close', () => clearInterval(poll));
}
const field = (answer: Answer | undefined, name: string) => answer?.fields.filter(([n]) => n === name).map(([, v]) => v);

/** the access lines for `path` once one is written (lines are flushed at least every 250 ms) */
async function accessLines(path: string): Promise<Array<Record<string, unknown>>> {
  const lines = () => portico.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'request' && entry.path === path);
  for (let i = 0; i < 40 && lines().length === 0; i++) await sleep(50);
  return lines();
}

t.test('an upgrade behind a request still being answered: that answer first, then the 101, then the tunnel', async (t) => {
  events.length = 0;
  const visited = await visit(get('/slow') + upgrade('/ws'), 5_000, frameThrough);
  const { answers, rest } = answersIn(visited.text);
  t.same(answers.map((a) => a.status), [200, 101], 'the GET\'s answer, then the 101');
  t.equal(answers[0]?.body, 'slow answer', 'the GET\'s answer whole, before the 101');
  t.same(field(answers[1], 'sec-websocket-accept'), [ACCEPT]);
  t.equal(rest, FRAME.toString('latin1'), 'after the 101 only the tunnel\'s bytes: the frame, echoed');
  t.same(events.slice(0, 3), ['/slow', '/slow answered', '/ws'], 'the upgrade went to the upstream once the earlier answer was out');
  t.match((await accessLines('/slow'))[0], { status: 200, route: 'project' });
  t.notOk((await accessLines('/slow'))[0].aborted, 'the GET\'s answer was not cut');
  t.match((await accessLines('/ws'))[0], { status: 101, route: 'project' });
});

t.test('a refusal behind a request still being answered: both answers, in order, then the connection closes', async (t) => {
  // the upstream's refusal (302), Portico's own before routing (two Host fields: 400) and a CONNECT (405)
  const cases = [
    { bytes: upgrade('/refused'), status: 302, path: '/refused', line: { status: 302, route: 'project', method: 'GET' } },
    { bytes: upgrade('/two-hosts', 'Host: other.localhost\r\n'), status: 400, path: '/two-hosts', line: { status: 400, route: 'unknown', method: 'GET' } },
    { bytes: `CONNECT ${HOSTNAME}:443 HTTP/1.1\r\nHost: ${HOSTNAME}:443\r\n\r\n`, status: 405, path: '', line: { status: 405, route: 'unknown', method: 'CONNECT' } },
  ];
  for (const { bytes, status, path, line } of cases) {
    const before = portico.logs.length;
    const visited = await visit(get('/slow') + bytes, 5_000);
    const { answers, rest } = answersIn(visited.text);
    t.same(answers.map((a) => a.status), [200, status], `${status}: the GET's answer, then the refusal`);
    t.equal(answers[0]?.body, 'slow answer', `${status}: the GET's answer whole`);
    t.same(field(answers[1], 'connection'), ['close'], `${status}: the refusal says Connection: close`);
    t.equal(rest, '', `${status}: nothing after the refusal`);
    t.ok(visited.closedByServer, `${status}: and the connection closes`);
    if (status === 302) t.equal(answers[1]?.body, 'go log in');
    if (status === 400) t.match(JSON.parse(answers[1]?.body ?? '{}'), { code: 'invalid_request' });
    if (status === 405) t.same(field(answers[1], 'allow'), [''], '405: with Allow');
    for (let i = 0; i < 40 && !portico.logs.slice(before).some((l) => JSON.parse(l).method === line.method && JSON.parse(l).status === status); i++) await sleep(50);
    const lines = portico.logs.slice(before).map((l) => JSON.parse(l)).filter((e) => e.msg === 'request');
    t.match(lines.filter((e) => e.path === '/slow'), [{ status: 200 }], `${status}: the GET's line`);
    t.notOk(lines.find((e) => e.path === '/slow')?.aborted, `${status}: the GET's answer not cut`);
    const refusal = lines.filter((e) => e.path === path && e.status === status);
    t.match(refusal, [line], `${status}: one line for the refusal`);
    t.notOk(refusal[0]?.aborted, `${status}: its answer not cut`);
  }
});

t.test('a visitor gone while its upgrade waited: the upgrade never reaches the upstream, and its line says 499', async (t) => {
  events.length = 0;
  await visit(get('/slow') + upgrade('/ws-left'), 5_000, (socket) => onceUpstreamHasSlow(() => setTimeout(() => socket.destroy(), 100)));
  await sleep(SLOW_MS + 300);
  t.notOk(events.includes('/ws-left'), 'no upgrade request upstream');
  t.match(await accessLines('/ws-left'), [{ status: 499, aborted: true, route: 'unknown' }]);
});

t.test('upstream field bytes above 0x7F reach the visitor as they came, in a 101 and in a refusal', async (t) => {
  for (const path of ['/latin101', '/latin403']) {
    const raw = Buffer.from((await visit(upgrade(path), 2_000)).text, 'latin1');
    const head = raw.subarray(0, raw.indexOf('\r\n\r\n') + 4);
    t.ok(head.includes(Buffer.from('x-name: caf\xe9\r\n', 'latin1')), `${path}: the byte 0xE9 as it came (${head.subarray(head.indexOf('x-name')).toString('hex').slice(0, 30)})`);
    t.notOk(head.includes(Buffer.from('c3a9', 'hex')), `${path}: not re-encoded as UTF-8`);
  }
});

t.test('a graceful stop while an upgrade waits behind an answer: the answer, then the 101, and the WebSocket carries frames', async (t) => {
  events.length = 0;
  let stopping: Promise<void> | undefined;
  const visited = await visit(get('/slow') + upgrade('/ws'), 5_000, (socket, text) => {
    onceUpstreamHasSlow(() => {
      stopped = true;
      stopping = portico.stop();
    });
    frameThrough(socket, text);
  });
  await stopping;
  const { answers, rest } = answersIn(visited.text);
  t.same(answers.map((a) => a.status), [200, 101], 'the GET\'s answer, then the 101');
  t.equal(rest, FRAME.toString('latin1'), 'the frame echoed while Portico stops');
});
