// How a visitor's request is framed on its way up, through the real edge (Portico in this process, TLS
// with SNI, HTTP/1.1 and HTTP/2 visitors) to a hand-made upstream that records every request it reads:
// - a non-idempotent request is never sent twice (RFC 9110 §9.2.2, RFC 9112 §9.3.1), even when the
//   reused connection it went on closes without an answer; an idempotent one is retried once;
// - a Transfer-Encoding other than chunked alone is refused with 501 (RFC 9112 §6.1), nothing sent up;
// - POST, PUT and PATCH without a body go up with `content-length: 0` (RFC 9110 §8.6), GET and HEAD without;
// - an HTTP/2 GET or HEAD with DATA and no content-length has its body forwarded, not dropped.
import t from 'tap';
import http2 from 'node:http2';
import net from 'node:net';
import tls from 'node:tls';
import zlib from 'node:zlib';
import type { AddressInfo } from 'node:net';
import { accountWithKey, admin } from '../helpers/client.ts';
import { llhttpMessages, type Message } from '../helpers/llhttp-reference.ts';
import { startPortico } from '../helpers/portico.ts';

/** one request as the upstream read it */
interface Seen {
  /** accept order of its connection, from 0 */
  conn: number;
  /** order on its connection, from 0 */
  index: number;
  method: string;
  path: string;
  /** field names lowercased, values as sent */
  fields: Record<string, string>;
  /** de-chunked when chunked */
  body: string;
}

// ---------------------------------------------------------------------------------------------------
// the upstream: reads requests (Content-Length, chunked, or no body), records them, and answers 200 —
// except a request to /acted-on that is not the first on its connection: it is read (and acted on),
// then the connection closes without an answer, as a worker that crashed after charging the card

const seen: Seen[] = [];
const sockets = new Set<net.Socket>();
let accepted = 0;
const upstream = net.createServer((socket) => {
  const conn = accepted++;
  let index = 0;
  let buffered = Buffer.alloc(0);
  sockets.add(socket);
  socket.on('error', () => undefined);
  socket.once('close', () => sockets.delete(socket));
  socket.on('data', (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    for (let request = readRequest(buffered); request !== null; request = readRequest(buffered)) {
      buffered = buffered.subarray(request.length);
      const one: Seen = { conn, index: index++, ...request.seen };
      seen.push(one);
      if (one.path === '/acted-on' && one.index > 0) {
        setTimeout(() => socket.destroy(), 50);
        return;
      }
      const body = `${one.method} ${one.path} on ${conn}`;
      socket.write(`HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
    }
  });
});

function readRequest(data: Buffer): { seen: Omit<Seen, 'conn' | 'index'>; length: number } | null {
  const end = data.indexOf('\r\n\r\n');
  if (end === -1) return null;
  const [line, ...lines] = data.toString('latin1', 0, end).split('\r\n');
  const [method, path] = line.split(' ');
  const fields: Record<string, string> = {};
  for (const field of lines) {
    const colon = field.indexOf(':');
    const name = field.slice(0, colon).toLowerCase();
    // a repeated framing field would be a finding of its own: keep every value
    fields[name] = name in fields ? `${fields[name]}, ${field.slice(colon + 1).trim()}` : field.slice(colon + 1).trim();
  }
  const start = end + 4;
  const record = (body: string, length: number) => ({ seen: { method, path, fields, body }, length });
  if (fields['content-length'] !== undefined) {
    const n = Number(fields['content-length']);
    return data.length < start + n ? null : record(data.toString('latin1', start, start + n), start + n);
  }
  if (fields['transfer-encoding'] === undefined) return record('', start);
  let body = '';
  for (let at = start; ;) {
    const nl = data.indexOf('\r\n', at);
    if (nl === -1) return null;
    const size = parseInt(data.toString('latin1', at, nl), 16);
    if (size === 0) return data.length < nl + 4 ? null : record(body, nl + 4);
    if (data.length < nl + 2 + size + 2) return null;
    body += data.toString('latin1', nl + 2, nl + 2 + size);
    at = nl + 2 + size + 2;
  }
}

await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
const portico = await startPortico();
t.teardown(async () => {
  await portico.stop();
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => upstream.close(resolve));
});
const owner = await accountWithKey(portico.ports.admin);
const made = await admin(portico.ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'forwarding', upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` });
const HOSTNAME: string = made.json.defaultDomain;
const { ca } = portico;
// the fallback certificate's *.localhost does not satisfy Node's identity check: trust it by its CA, check it as localhost
const identity = (_name: string, cert: tls.PeerCertificate) => tls.checkServerIdentity('localhost', cert);

// ---------------------------------------------------------------------------------------------------
// visitors

/** raw HTTP/1.1 requests written at once on one connection (the last should close it); the answers as llhttp reads them */
function h1(raw: string | Buffer, methods: string[]): Promise<Message[]> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: portico.ports.https, servername: HOSTNAME, ca, checkServerIdentity: identity, ALPNProtocols: ['http/1.1'] }, () => socket.write(raw));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('end', () => {
      const { messages, rest } = llhttpMessages(Buffer.concat(chunks), methods);
      if (rest) reject(new Error(`bytes outside an answer: ${Buffer.concat(chunks).toString('latin1')}`));
      else resolve(messages);
    });
    socket.on('error', reject);
    socket.setTimeout(10_000, () => socket.destroy(new Error('no close')));
  });
}

const h1Request = (method: string, path: string, fields = '', body = '') => `${method} ${path} HTTP/1.1\r\nHost: ${HOSTNAME}\r\n${fields}\r\n${body}`;
const CLOSE = 'Connection: close\r\n';

function h2session(): http2.ClientHttp2Session {
  return http2.connect(`https://${HOSTNAME}:${portico.ports.https}`, { ca, checkServerIdentity: identity, host: '127.0.0.1' } as http2.SecureClientSessionOptions);
}

/** one stream; `body` undefined: END_STREAM on the HEADERS frame */
function h2(session: http2.ClientHttp2Session, headers: http2.OutgoingHttpHeaders, body?: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const stream = session.request(headers, { endStream: body === undefined });
    if (body !== undefined) stream.end(body);
    let status = 0;
    let text = '';
    stream.on('response', (h) => (status = Number(h[':status'])));
    stream.setEncoding('latin1');
    stream.on('data', (chunk: string) => (text += chunk));
    stream.on('end', () => resolve({ status, body: text }));
    stream.on('error', reject);
  });
}

/** the requests the upstream read since `from`, for `path` */
const upstreamGot = (from: number, path: string) => seen.slice(from).filter((s) => s.path === path);

// ---------------------------------------------------------------------------------------------------
// 1. no automatic retry of a non-idempotent request

t.test('a request acted on by the upstream, whose reused connection then closes unanswered, is sent twice only when idempotent', async (t) => {
  const session = h2session();
  t.teardown(() => session.close());
  for (const [protocol, method] of ['POST', 'PATCH', 'GET', 'PUT', 'DELETE', 'OPTIONS'].flatMap((m) => [['h1', m], ['h2', m]])) {
    const idempotent = method !== 'POST' && method !== 'PATCH';
    const from = seen.length;
    // an idle upstream connection in the pool, which has answered once: the next request goes on it
    const warm = protocol === 'h1'
      ? (await h1(h1Request('GET', '/warm', CLOSE), ['GET']))[0]
      : await h2(session, { ':path': '/warm' });
    t.equal(warm.status, 200, `${protocol} ${method}: warmed`);
    let status: number;
    if (protocol === 'h1') {
      // Content-Length: 0, as `curl -X POST -d ''` sends it: a request with no body to hold back a retry
      [{ status }] = await h1(h1Request(method, '/acted-on', `Content-Length: 0\r\n${CLOSE}`), [method]);
    } else {
      // END_STREAM with the HEADERS: no body
      ({ status } = await h2(session, { ':method': method, ':path': '/acted-on' }));
    }
    const got = upstreamGot(from, '/acted-on');
    if (idempotent) {
      t.equal(status, 200, `${protocol} ${method}: retried on a new connection and answered`);
      t.equal(got.length, 2, `${protocol} ${method}: the upstream read it twice (once unanswered)`);
    } else {
      t.equal(status, 502, `${protocol} ${method}: the 502 page, not a retry`);
      t.equal(got.length, 1, `${protocol} ${method}: the upstream read it once`);
    }
  }
});

// ---------------------------------------------------------------------------------------------------
// 2. Transfer-Encoding other than chunked alone

t.test('a request whose Transfer-Encoding names a coding before chunked is refused with 501, nothing sent up; the connection goes on', async (t) => {
  const gzipped = zlib.gzipSync('hello world');
  for (const [label, fields] of [
    ['gzip, chunked', 'Transfer-Encoding: gzip, chunked\r\n'],
    ['identity, chunked', 'Transfer-Encoding: identity, chunked\r\n'],
    ['gzip and chunked on two lines', 'Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n'],
    ['x-custom,CHUNKED', 'Transfer-Encoding: x-custom,CHUNKED\r\n'],
  ]) {
    const from = seen.length;
    const raw = Buffer.concat([
      Buffer.from(h1Request('POST', '/coded', fields), 'latin1'),
      Buffer.from(`${gzipped.length.toString(16)}\r\n`), gzipped, Buffer.from('\r\n0\r\n\r\n'),
      Buffer.from(h1Request('GET', '/after', CLOSE), 'latin1'),
    ]);
    const [refused, after] = await h1(raw, ['POST', 'GET']);
    t.equal(refused?.status, 501, `${label}: 501`);
    const error = JSON.parse(refused?.body ?? '{}');
    t.equal(error.code, 'not_implemented', `${label}: the Error body`);
    t.match(error.message, label.startsWith('x-custom') ? /x-custom/ : label.startsWith('identity') ? /identity/ : /gzip/, `${label}: the message names the coding (${error.message})`);
    t.equal(after?.status, 200, `${label}: the next request on the connection is answered`);
    t.same(seen.slice(from).map((s) => s.path), ['/after'], `${label}: nothing of the refused request reached the upstream`);
  }
});

t.test('Transfer-Encoding: chunked alone, in any letter case, is forwarded (chunked)', async (t) => {
  for (const value of ['chunked', 'Chunked', 'CHUNKED']) {
    const from = seen.length;
    const [answer] = await h1(h1Request('POST', '/chunked', `Transfer-Encoding: ${value}\r\n${CLOSE}`, '5\r\nhello\r\n0\r\n\r\n'), ['POST']);
    t.equal(answer?.status, 200, value);
    const [got] = upstreamGot(from, '/chunked');
    t.equal(got?.body, 'hello', `${value}: the body went up`);
    t.equal(got?.fields['transfer-encoding'], 'chunked', `${value}: chunked`);
  }
});

// ---------------------------------------------------------------------------------------------------
// 3. Content-Length: 0 for methods that carry a body

/** the framing fields a request went up with: `content-length: N`, `transfer-encoding: X` or `none` */
const framing = (s: Seen | undefined) => s === undefined ? 'not received' : s.fields['content-length'] !== undefined ? `content-length: ${s.fields['content-length']}` : s.fields['transfer-encoding'] !== undefined ? `transfer-encoding: ${s.fields['transfer-encoding']}` : 'none';

t.test('HTTP/1.1: POST, PUT, PATCH without a body go up with content-length: 0; GET, HEAD, DELETE, OPTIONS without framing', async (t) => {
  const expected: Record<string, string> = { POST: 'content-length: 0', PUT: 'content-length: 0', PATCH: 'content-length: 0', GET: 'none', HEAD: 'none', DELETE: 'none', OPTIONS: 'none' };
  for (const [method, want] of Object.entries(expected)) {
    for (const [label, fields] of [['Content-Length: 0', 'Content-Length: 0\r\n'], ['no framing field', '']]) {
      const from = seen.length;
      const [answer] = await h1(h1Request(method, '/empty', `${fields}${CLOSE}`), [method]);
      t.equal(answer?.status, 200, `${method} with ${label}: answered`);
      t.equal(framing(upstreamGot(from, '/empty')[0]), want, `${method} with ${label}: ${want}`);
    }
  }
});

t.test('HTTP/2: POST, PUT, PATCH without a body go up with content-length: 0; GET, HEAD, DELETE without framing', async (t) => {
  const session = h2session();
  t.teardown(() => session.close());
  const expected: Record<string, string> = { POST: 'content-length: 0', PUT: 'content-length: 0', PATCH: 'content-length: 0', GET: 'none', HEAD: 'none', DELETE: 'none' };
  for (const [method, want] of Object.entries(expected)) {
    let from = seen.length;
    t.equal((await h2(session, { ':method': method, ':path': '/empty' })).status, 200, `${method}, END_STREAM on HEADERS: answered`);
    t.equal(framing(upstreamGot(from, '/empty')[0]), want, `${method}, END_STREAM on HEADERS: ${want}`);
    from = seen.length;
    // content-length: 0, then an empty DATA frame that ends the stream
    t.equal((await h2(session, { ':method': method, ':path': '/empty', 'content-length': '0' }, '')).status, 200, `${method}, content-length: 0: answered`);
    t.equal(framing(upstreamGot(from, '/empty')[0]), want, `${method}, content-length: 0: ${want}`);
  }
});

t.test('HTTP/2: HEADERS without END_STREAM, then an empty DATA frame that ends the stream, is a request without a body', async (t) => {
  // what a client that ends the stream on its own (stream.end() after request()) sends: no content-length,
  // no content. It goes up as no body: content-length: 0 or no framing, never an empty chunked body
  const session = h2session();
  t.teardown(() => session.close());
  const expected: Record<string, string> = { POST: 'content-length: 0', PUT: 'content-length: 0', PATCH: 'content-length: 0', GET: 'none', DELETE: 'none', OPTIONS: 'none' };
  for (const [method, want] of Object.entries(expected)) {
    const from = seen.length;
    t.equal((await h2(session, { ':method': method, ':path': '/empty' }, '')).status, 200, `${method}: answered`);
    t.equal(framing(upstreamGot(from, '/empty')[0]), want, `${method}: ${want}`);
  }
  // content that comes later than the first look still goes up whole (chunked: its length is unknown)
  const from = seen.length;
  const answered = await new Promise<number>((resolve, reject) => {
    const stream = session.request({ ':method': 'POST', ':path': '/late' }, { endStream: false });
    setTimeout(() => stream.end('late body'), 600);
    stream.on('response', (h) => resolve(Number(h[':status'])));
    stream.on('error', reject);
    stream.resume();
  });
  t.equal(answered, 200);
  const [got] = upstreamGot(from, '/late');
  t.equal(framing(got), 'transfer-encoding: chunked', 'a body 600 ms after the head: chunked');
  t.equal(got?.body, 'late body', 'the body went up');
});

// ---------------------------------------------------------------------------------------------------
// 4. an HTTP/2 GET or HEAD with a body

t.test('HTTP/2: a GET or HEAD with DATA and no content-length has its body forwarded (chunked), as over HTTP/1.1', async (t) => {
  const session = h2session();
  t.teardown(() => session.close());
  for (const method of ['GET', 'HEAD']) {
    let from = seen.length;
    t.equal((await h2(session, { ':method': method, ':path': '/with-body' }, 'hello')).status, 200, `HTTP/2 ${method}: answered`);
    let [got] = upstreamGot(from, '/with-body');
    t.equal(framing(got), 'transfer-encoding: chunked', `HTTP/2 ${method}: chunked`);
    t.equal(got?.body, 'hello', `HTTP/2 ${method}: the body went up`);
    // the same request over HTTP/1.1, for comparison
    from = seen.length;
    await h1(h1Request(method, '/with-body', `Transfer-Encoding: chunked\r\n${CLOSE}`, '5\r\nhello\r\n0\r\n\r\n'), [method]);
    [got] = upstreamGot(from, '/with-body');
    t.equal(framing(got), 'transfer-encoding: chunked', `HTTP/1.1 ${method}: chunked`);
    t.equal(got?.body, 'hello', `HTTP/1.1 ${method}: the body went up`);
  }
  // with a declared length the body goes up with it
  const from = seen.length;
  t.equal((await h2(session, { ':method': 'GET', ':path': '/with-body', 'content-length': '5' }, 'hello')).status, 200);
  const [got] = upstreamGot(from, '/with-body');
  t.equal(framing(got), 'content-length: 5', 'HTTP/2 GET with content-length: passed on');
  t.equal(got?.body, 'hello');
});
