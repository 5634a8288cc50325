// A body past the 64 KiB cap sent without Content-Length (HTTP/1.1 chunked, HTTP/2 DATA without
// content-length) is 413 and costs the visitor nothing more: the HTTP/1.1 connection answers its next
// request, the HTTP/2 connection its next stream. Before, the 413 said keep-alive and the connection
// was then reset, and over HTTP/2 the whole connection got GOAWAY (every other stream of the page with it).
import t from 'tap';
import http2 from 'node:http2';
import tls from 'node:tls';
import { startPortico } from '../helpers/portico.ts';
import { accountWithKey } from '../helpers/client.ts';
import { afterContinue, converse } from '../helpers/conversation.ts';

const portico = await startPortico();
t.teardown(() => portico.stop());
const { ports, ca } = portico;
const { key } = await accountWithKey(ports.admin, 'business');
const HOST = 'api.localhost';
const MIB = Buffer.alloc(1024 * 1024, 'a');

t.test('HTTP/1.1: a chunked body over the cap gets 413, and the connection answers the next request', async (t) => {
  const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: HOST, ca, checkServerIdentity: () => undefined, ALPNProtocols: ['http/1.1'] });
  let text = '';
  let reset = false;
  socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
  socket.on('error', () => (reset = true));
  await new Promise((resolve) => socket.once('secureConnect', resolve));
  socket.write(`POST /v1/categories HTTP/1.1\r\nHost: ${HOST}\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`);
  for (let sent = 0; sent < MIB.length; sent += 64 * 1024) {
    const piece = MIB.subarray(sent, sent + 64 * 1024);
    socket.write(`${piece.length.toString(16)}\r\n`);
    socket.write(piece);
    socket.write('\r\n');
  }
  socket.write('0\r\n\r\n');
  socket.write(`GET /v1/categories HTTP/1.1\r\nHost: ${HOST}\r\nAuthorization: Bearer ${key}\r\nConnection: close\r\n\r\n`);
  await new Promise((resolve) => socket.once('close', resolve));
  const statuses = [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
  t.same(statuses, [413, 200], 'the 413, then the next request answered on the same connection');
  t.match(text, /payload_too_large/);
  t.notOk(reset, 'no reset');
});

t.test('HTTP/2: a streamed body over the cap gets 413 on its stream; the connection goes on', async (t) => {
  const session = http2.connect(`https://127.0.0.1:${ports.https}`, { ca, servername: HOST, checkServerIdentity: () => undefined });
  let goaway = false;
  session.on('goaway', () => (goaway = true));
  session.on('error', () => undefined);
  t.teardown(() => session.close());
  const post = session.request({ ':method': 'POST', ':path': '/v1/categories', ':authority': HOST, authorization: `Bearer ${key}`, 'content-type': 'application/json' });
  post.on('error', () => undefined);
  const status = new Promise<number>((resolve) => post.once('response', (h) => resolve(Number(h[':status']))));
  const closed = new Promise((resolve) => post.once('close', resolve));
  post.resume();
  for (let sent = 0; sent < MIB.length; sent += 64 * 1024) post.write(MIB.subarray(sent, sent + 64 * 1024));
  post.end();
  t.equal(await status, 413);
  await closed;
  const next = session.request({ ':path': '/v1/categories', ':authority': HOST, authorization: `Bearer ${key}` });
  const nextStatus = await new Promise<number>((resolve, reject) => {
    next.once('response', (h) => resolve(Number(h[':status'])));
    next.once('error', reject);
  });
  next.resume();
  t.equal(nextStatus, 200, 'the next stream on the same connection is answered');
  t.notOk(goaway, 'no GOAWAY');
});

t.test('Expect: 100-continue: a body refused from its head gets the refusal instead of 100; one that is read gets 100 first', async (t) => {
  // Node's server sent 100 Continue as soon as the head arrived: curl then sent a 1 MiB body only to
  // read 413 (or 401) after it
  const ask = (head: string, body: string | Buffer) => converse({ port: ports.https, servername: HOST, ca }, head, afterContinue(body));
  const statuses = (text: string) => [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
  const post = (auth: string, length: number) =>
    `POST /v1/categories HTTP/1.1\r\nHost: ${HOST}\r\n${auth}Content-Type: application/json\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`;

  const tooLarge = await ask(post(`Authorization: Bearer ${key}\r\n`, MIB.length), MIB);
  t.same(statuses(tooLarge), [413], 'over the cap: 413, no 100 before it');
  const anonymous = await ask(post('', 20), '{"name":"no key    "}');
  t.same(statuses(anonymous), [401], 'without a key: 401, no 100 before it');
  const json = '{"name":"continued"}';
  const read = await ask(`${post(`Authorization: Bearer ${key}\r\n`, json.length).slice(0, -2)}Connection: close\r\n\r\n`, json);
  t.same(statuses(read), [100, 201], 'a body that is read: 100, then the answer');
  t.match(read, /"name":"continued"/);
});

t.test('Expect: 100-continue over HTTP/2 still gets its 100 and its answer', async (t) => {
  const session = http2.connect(`https://127.0.0.1:${ports.https}`, { ca, servername: HOST, checkServerIdentity: () => undefined });
  session.on('error', () => undefined);
  t.teardown(() => session.close());
  const post = session.request({ ':method': 'POST', ':path': '/v1/categories', ':authority': HOST, authorization: `Bearer ${key}`, 'content-type': 'application/json', expect: '100-continue' });
  post.on('error', () => undefined);
  const continued = new Promise<boolean>((resolve) => {
    post.once('continue', () => resolve(true));
    post.once('response', () => resolve(false));
  });
  const status = new Promise<number>((resolve) => post.once('response', (h) => resolve(Number(h[':status']))));
  t.ok(await continued, 'a 100 first');
  post.end('{"name":"continued over h2"}');
  t.equal(await status, 201);
  post.resume();
  await new Promise((resolve) => post.once('close', resolve));
});
