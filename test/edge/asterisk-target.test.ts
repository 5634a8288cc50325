// The asterisk-form target: `OPTIONS *` asks about the server (RFC 9110 §9.3.7) and Portico answers it
// (200, empty), as Go's server and Caddy do; before, it reached the upstream as `OPTIONS /`, a question
// about the home page. `*` with any other method is malformed (RFC 9112 §3.2.4) → 400; before, `GET *`
// fetched the upstream's `/`.
import t from 'tap';
import http2 from 'node:http2';
import tls from 'node:tls';
import { startProjectBed } from '../helpers/project-bed.ts';

const seen: string[] = [];
const { portico, hostname: HOSTNAME } = await startProjectBed(t, 'star', (req, res) => {
  seen.push(`${req.method} ${req.url}`);
  res.end('from the upstream');
});
const { ports, ca } = portico;

/** one HTTP/1.1 request as raw bytes; the whole answer as text */
function raw(requestLine: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: HOSTNAME, ca, checkServerIdentity: () => undefined, ALPNProtocols: ['http/1.1'] }, () => {
      socket.write(`${requestLine}\r\nHost: ${HOSTNAME}\r\nConnection: close\r\n\r\n`);
    });
    let text = '';
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
    socket.on('error', reject);
    socket.on('end', () => resolve(text));
  });
}

function h2(method: string): Promise<{ status: number; body: string }> {
  const session = http2.connect(`https://127.0.0.1:${ports.https}`, { ca, servername: HOSTNAME, checkServerIdentity: () => undefined });
  session.on('error', () => undefined);
  return new Promise((resolve) => {
    const stream = session.request({ ':method': method, ':path': '*', ':authority': HOSTNAME });
    let status = 0;
    let body = '';
    stream.on('response', (headers) => (status = Number(headers[':status'])));
    stream.on('data', (chunk: Buffer) => (body += chunk));
    stream.on('error', () => undefined);
    stream.on('close', () => {
      session.close();
      resolve({ status, body });
    });
    stream.end();
  });
}

t.test('OPTIONS * is answered by Portico over both protocols; the upstream is not asked', async (t) => {
  const h1 = await raw('OPTIONS * HTTP/1.1');
  t.match(h1, /^HTTP\/1\.1 200 /, 'HTTP/1.1: 200');
  t.match(h1, /\r\ncontent-length: 0\r\n/i, 'empty');
  const over2 = await h2('OPTIONS');
  t.equal(over2.status, 200, 'HTTP/2: 200');
  t.equal(over2.body, '');
  t.same(seen, [], 'nothing reached the upstream');
});

t.test('* with another method is a 400, over both protocols; the upstream is not asked', async (t) => {
  const h1 = await raw('GET * HTTP/1.1');
  t.match(h1, /^HTTP\/1\.1 400 /, 'HTTP/1.1 GET *: 400');
  t.match(h1, /OPTIONS only/, 'saying why');
  const over2 = await h2('GET');
  t.not(over2.status, 200, `HTTP/2 GET *: refused (${over2.status || 'stream reset'})`);
  t.notMatch(over2.body, /from the upstream/);
  t.same(seen, [], 'nothing reached the upstream');
  // an ordinary request still goes through
  t.match(await raw('GET / HTTP/1.1'), /from the upstream/);
});
