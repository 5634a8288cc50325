// Names as clients send them, and the plain HTTP listener's record of what it answered:
// - an SNI with a trailing dot (Node's https client sends `shop.localhost.` for https://shop.localhost./)
//   names the same site as the Host without it: before, every such request was 421, also on a retry;
// - a bracketed Host that is no IPv6 address (`[evil.example/@good.example]`) names no site: before, the
//   HTTP listener redirected to whatever was inside the brackets and the HTTPS listener routed it;
// - the HTTP listener writes an access line per answer (redirects, ACME challenges), as README says:
//   before, it only counted them.
import t from 'tap';
import http from 'node:http';
import http2 from 'node:http2';
import tls from 'node:tls';
import { setTimeout as sleep } from 'node:timers/promises';
import { startProjectBed } from '../helpers/project-bed.ts';

const { portico } = await startProjectBed(t, 'shop', (req, res) => res.end(`upstream saw ${req.headers['x-forwarded-host']}`));
const { ports, ca } = portico;

/** one HTTP/1.1 request on a new TLS connection with this SNI; the answer's text */
function overTls(servername: string, host: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername, ca, checkServerIdentity: () => undefined, ALPNProtocols: ['http/1.1'] }, () => {
      socket.write(`GET /dot HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
    });
    let text = '';
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
    socket.on('error', reject);
    socket.on('end', () => resolve(text));
  });
}

function plain(host: string, path: string): Promise<{ status: number; location?: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: ports.http, path, headers: { host } }, (res) => {
      res.resume().on('end', () => resolve({ status: res.statusCode!, location: res.headers.location }));
    });
    req.on('error', reject).end();
  });
}

t.test('an SNI with a trailing dot names the same site', async (t) => {
  for (const host of ['shop.localhost', 'shop.localhost.', 'SHOP.localhost']) {
    const answer = await overTls('shop.localhost.', host);
    t.match(answer, /^HTTP\/1\.1 200 /, `SNI shop.localhost., Host ${host} → 200`);
    t.match(answer, /upstream saw shop\.localhost/);
  }
  t.match(await overTls('shop.localhost.', 'other.localhost'), /^HTTP\/1\.1 421 /, 'another name is still 421');
  const session = http2.connect(`https://127.0.0.1:${ports.https}`, { ca, servername: 'shop.localhost.', checkServerIdentity: () => undefined });
  session.on('error', () => undefined);
  t.teardown(() => session.close());
  const status = await new Promise<number>((resolve) => {
    const stream = session.request({ ':path': '/dot', ':authority': 'shop.localhost.' });
    stream.on('response', (h) => resolve(Number(h[':status'])));
    stream.on('error', () => resolve(0));
    stream.resume();
  });
  t.equal(status, 200, 'HTTP/2, :authority with the dot too');
});

t.test('a bracketed Host that is no IPv6 address names no site', async (t) => {
  for (const host of ['[evil.example/@good.example]', '[evil.example]', '[a b]', '[::1]junk']) {
    const answer = await plain(host, '/path');
    t.equal(answer.status, 400, `HTTP listener, Host ${host} → 400`);
    t.equal(answer.location, undefined, 'no redirect anywhere');
  }
  t.match(await overTls('shop.localhost', '[shop.localhost]'), /^HTTP\/1\.1 (400|404|421) /, 'HTTPS: [shop.localhost] is not the shop');
  const v6 = await plain('[::1]:8080', '/path');
  t.equal(v6.status, 308, 'an IPv6 literal still redirects');
  t.equal(v6.location, 'https://[::1]/path');
});

t.test('the HTTP listener writes an access line per answer', async (t) => {
  await plain('shop.localhost', '/to-https?x=1');
  await plain('shop.localhost', '/.well-known/acme-challenge/nope');
  await sleep(400);
  const lines = portico.logs.map((line) => JSON.parse(line)).filter((e) => e.msg === 'request' && (e.path === '/to-https' || e.path === '/.well-known/acme-challenge/nope'));
  t.match(lines, [
    { method: 'GET', hostname: 'shop.localhost', path: '/to-https', route: 'redirect', status: 308, protocol: '1.1', clientIp: '127.0.0.1' },
    { method: 'GET', hostname: 'shop.localhost', path: '/.well-known/acme-challenge/nope', route: 'acme', status: 404 },
  ]);
  t.equal(lines.length, 2, 'one line each');
});
