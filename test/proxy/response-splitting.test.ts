// Regression tests for the response-splitting defect: hand-made upstream answers whose framing is
// ambiguous or invalid, each sent through the real edge (Portico in this process, TLS with SNI, the
// project's default hostname) to a visitor that pipelines two requests over HTTP/1.1, and to an
// HTTP/2 visitor with two streams on one connection. The first answer must be a 502 page, the second
// the upstream's honest answer, intact, and nothing the hostile upstream injected may reach anyone.
import t from 'tap';
import http2 from 'node:http2';
import net from 'node:net';
import tls from 'node:tls';
import type { AddressInfo } from 'node:net';
import { admin } from '../helpers/client.ts';
import { rawUpstreamBed } from '../helpers/raw-upstream.ts';
import { llhttpMessages } from '../helpers/llhttp-reference.ts';

const SMUGGLED = 'HTTP/1.1 200 OK\r\nX-Smuggled: yes\r\nContent-Length: 8\r\n\r\nSMUGGLED';
// path → the upstream's answer, as bytes on the wire
const HOSTILE: Record<string, string> = {
  // the defect as reported: Content-Length 2, a chunked body "OK" followed by a whole injected answer
  '/cl-2-and-chunked': `HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nOK\r\n${(SMUGGLED.length).toString(16)}\r\n${SMUGGLED}\r\n0\r\n\r\n`,
  // Content-Length larger than the chunked body: the visitor's next answer swallowed into this one
  '/cl-100-and-chunked': 'HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
  '/xchunked-and-cl': `HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\nContent-Length: 2\r\n\r\nOK${SMUGGLED}`,
  '/space-before-colon': 'HTTP/1.1 200 OK\r\nX-Thing : 1\r\nContent-Length: 2\r\n\r\nOK',
  '/nul-in-value': 'HTTP/1.1 200 OK\r\nX-Thing: a\x00b\r\nContent-Length: 2\r\n\r\nOK',
  '/bad-chunk-size': 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nOK\r\n0\r\n\r\n',
  '/chunk-size-space': 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\nOK\r\n0\r\n\r\n',
  '/status-1e3': 'HTTP/1.1 1e3 OK\r\nContent-Length: 2\r\n\r\nOK',
  '/status-2e2': 'HTTP/1.1 2e2 OK\r\nContent-Length: 2\r\n\r\nOK',
  '/two-content-lengths': 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nOK',
  '/gzip-coding': 'HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nnot-really-gzip',
  // a head with bare LF line ends, the connection then held open: refused at once, not after the timeout
  '/bare-lf-held-open': 'HTTP/1.1 200 OK\nContent-Type: text/plain\n',
};
const HONEST = 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nfine!';

// the upstream: answers each request by its path and keeps the connection open (as a hostile one
// would); the upstream timeout is the default 30 s: a refusal must not wait for it
const bed = await rawUpstreamBed(t, 'splitting', (path, socket) => socket.write(HOSTILE[path] ?? HONEST, 'latin1'));
const { portico, identity } = bed;
const { ports, ca } = portico;
const HOSTNAME = bed.hostname;

/** two requests written at once on one HTTP/1.1 connection; every byte that came back, to the close */
function pipelined(first: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: HOSTNAME, ca, checkServerIdentity: identity, ALPNProtocols: ['http/1.1'] }, () => {
      socket.write(`GET ${first} HTTP/1.1\r\nHost: ${HOSTNAME}\r\n\r\nGET /honest HTTP/1.1\r\nHost: ${HOSTNAME}\r\nConnection: close\r\n\r\n`);
    });
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('end', () => resolve(Buffer.concat(chunks)));
    socket.on('error', reject);
    socket.setTimeout(15_000, () => socket.destroy(new Error(`no close after ${first}: ${Buffer.concat(chunks).toString('latin1')}`)));
  });
}

function h2get(session: http2.ClientHttp2Session, path: string): Promise<{ status: number; headers: http2.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':path': path });
    let headers: http2.IncomingHttpHeaders = {};
    let body = '';
    stream.on('response', (h) => (headers = h));
    stream.setEncoding('latin1');
    stream.on('data', (chunk: string) => (body += chunk));
    stream.on('end', () => resolve({ status: Number(headers[':status']), headers, body }));
    stream.on('error', reject);
  });
}

for (const path of Object.keys(HOSTILE)) {
  t.test(`upstream answer ${path}: 502 to the visitor, the next answer on the connection intact`, async (t) => {
    const closedBefore = bed.closed();
    const bytes = await pipelined(path);
    const { messages, rest } = llhttpMessages(bytes, ['GET', 'GET']);
    t.equal(messages.length, 2, 'two answers, as two requests were sent');
    t.notOk(rest, 'no byte outside an answer');
    t.equal(messages[0]?.status, 502);
    t.match(messages[0]?.headers['content-type'], /text\/html/);
    t.match(messages[0]?.body, /not valid HTTP\/1\.1/, 'the page says what was wrong, for the site\'s owner');
    t.equal(messages[1]?.status, 200);
    t.equal(messages[1]?.body, 'fine!');
    t.notMatch(bytes.toString('latin1'), /Smuggled|SMUGGLED/i, 'nothing injected reaches the visitor');
    t.ok(bed.closed() > closedBefore, 'the upstream connection that sent it was closed');

    const session = http2.connect(`https://${HOSTNAME}:${ports.https}`, { ca, checkServerIdentity: identity, host: '127.0.0.1' } as http2.SecureClientSessionOptions);
    t.teardown(() => session.close());
    const [bad, good] = await Promise.all([h2get(session, path), h2get(session, '/honest')]);
    t.equal(bad.status, 502, 'HTTP/2: 502');
    t.match(bad.body, /not valid HTTP\/1\.1/);
    t.equal(good.status, 200, 'HTTP/2: the other stream intact');
    t.equal(good.body, 'fine!');
    t.notOk(bad.headers['x-smuggled'] ?? good.headers['x-smuggled']);
    // the session survived: another request on it works
    t.equal((await h2get(session, '/honest')).body, 'fine!');
  });
}

/** access lines for `path` (the log is written in batches: wait for the batch with them) */
async function accessLines(path: string, count: number, hostname = HOSTNAME): Promise<Array<Record<string, unknown>>> {
  for (let i = 0; ; i++) {
    const lines = portico.logs.filter((line) => line.includes('"msg":"request"')).map((line) => JSON.parse(line)).filter((line) => line.path === path && line.hostname === hostname);
    if (lines.length >= count || i === 40) return lines;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

t.test('each refusal is counted as invalid_response and logged as 502 over HTTP/1.1 and HTTP/2', async (t) => {
  const metrics = await admin(ports.admin, 'GET', '/metrics');
  const counted = Number(/portico_upstream_errors_total\{kind="invalid_response"\} (\d+)/.exec(metrics.text)?.[1] ?? 0);
  t.equal(counted, Object.keys(HOSTILE).length * 2, 'one per hostile answer, per protocol');
  for (const path of Object.keys(HOSTILE)) {
    const lines = await accessLines(path, 2);
    t.same(lines.map((line) => [line.status, line.protocol]).sort(), [[502, '1.1'], [502, '2.0']], path);
  }
});

t.test('a failure after the answer started: HTTP/1.1 closes, HTTP/2 resets the stream, the log says 502 aborted', async (t) => {
  // head and a first chunk now, a broken chunk 100 ms later
  const late = net.createServer((socket) => {
    socket.on('error', () => undefined);
    socket.once('data', () => {
      socket.write('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n');
      setTimeout(() => socket.write('zz\r\nnever\r\n'), 100);
    });
  });
  await new Promise<void>((resolve) => late.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise((resolve) => late.close(resolve)));
  const other = await admin(ports.admin, 'POST', '/admin/projects', { accountId: bed.accountId, name: 'breaks-later', upstream: `http://127.0.0.1:${(late.address() as AddressInfo).port}` });
  const hostname: string = other.json.defaultDomain;

  const h1 = await new Promise<string>((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: hostname, ca, checkServerIdentity: identity, ALPNProtocols: ['http/1.1'] }, () => {
      socket.write(`GET /h1 HTTP/1.1\r\nHost: ${hostname}\r\n\r\n`);
    });
    let text = '';
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
    socket.on('close', () => resolve(text));
    socket.on('error', reject);
  });
  t.match(h1, /^HTTP\/1\.1 200 OK\r\n/, 'the head had gone out');
  t.match(h1, /first/);
  t.notMatch(h1, /\r\n0\r\n\r\n$/, 'no last chunk: the visitor can tell the answer is cut');

  const session = http2.connect(`https://${hostname}:${ports.https}`, { ca, checkServerIdentity: identity, host: '127.0.0.1' } as http2.SecureClientSessionOptions);
  t.teardown(() => session.close());
  const code = await new Promise<number>((resolve) => {
    const stream = session.request({ ':path': '/h2' });
    stream.resume();
    // the reset surfaces as the stream's error; its code is what counts
    stream.on('error', () => undefined);
    stream.on('close', () => resolve(stream.rstCode));
  });
  t.equal(code, http2.constants.NGHTTP2_INTERNAL_ERROR, 'HTTP/2: RST_STREAM INTERNAL_ERROR');

  for (const path of ['/h1', '/h2']) {
    const [line] = await accessLines(path, 1, hostname);
    t.ok(line, `${path} logged`);
    t.equal(line?.status, 502, `${path}: logged as 502, never as 200`);
    t.equal(line?.aborted, true, `${path}: marked aborted`);
  }
});
