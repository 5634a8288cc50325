import t from 'tap';
import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import http2 from 'node:http2';
import path from 'node:path';
import { readFileSync, writeFileSync } from 'node:fs';
import { startPortico, tempDir } from '../helpers/portico.ts';
import { request, accountWithKey, api } from '../helpers/client.ts';

const portico = await startPortico({
  PORTICO_PUBLIC_HTTPS_PORT: '8443',
  PORTICO_TRUSTED_PROXIES: '127.0.0.1/32,::1',
});
t.teardown(() => portico.stop());
const { ca, ports } = portico;

const plain = (path: string, host: string, method = 'GET') =>
  new Promise<http.IncomingMessage>((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: ports.http, path, method, headers: { host } }, (res) => {
      res.resume();
      resolve(res);
    });
    req.on('error', reject);
    req.end();
  });

t.test('plain HTTP answers 308 to HTTPS with path, query and public port', async (t) => {
  const res = await plain('/shop/item?id=7&x=%20y', 'Example.COM.:8080');
  t.equal(res.statusCode, 308);
  t.equal(res.headers.location, 'https://example.com:8443/shop/item?id=7&x=%20y');
  const head = await plain('/', 'api.localhost', 'HEAD');
  t.equal(head.statusCode, 308);
  const challenge = await plain('/.well-known/acme-challenge/unknown-token', 'example.com');
  t.equal(challenge.statusCode, 404, 'challenge path is reserved, not redirected');
});

t.test('an unknown hostname gets the 404 page', async (t) => {
  const answer = await request(ports.https, 'localhost', ca, { path: '/', headers: { host: 'nobody.example' }, servername: 'localhost' });
  t.equal(answer.status, 421, 'Host differing from SNI is misdirected');
  const unknown = await request(ports.https, 'unknown.localhost', ca, { identity: 'localhost' });
  t.equal(unknown.status, 404);
  t.match(unknown.headers['content-type'], /text\/html/);
  t.match(unknown.text, /does not serve/);
});

t.test('Host differing from SNI → 421; no SNI or an IP literal SNI → Host decides', async (t) => {
  const mismatch = await request(ports.https, 'api.localhost', ca, { servername: 'localhost', path: '/v1/categories' });
  t.equal(mismatch.status, 421);
  t.equal(mismatch.json.code, 'misdirected_request');
  const noSni = await new Promise<string>((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: ports.https, ca, checkServerIdentity: (_h, cert) => tls.checkServerIdentity('api.localhost', cert), ALPNProtocols: ['http/1.1'] }, () => {
      socket.write('GET /v1/categories HTTP/1.1\r\nHost: api.localhost\r\nConnection: close\r\n\r\n');
    });
    let text = '';
    socket.on('data', (c) => (text += c));
    socket.on('end', () => resolve(text));
    socket.on('error', reject);
  });
  t.match(noSni, /^HTTP\/1\.1 401/, 'without SNI the Host header decides');
});

t.test('client IP: trusted proxies forward it, others cannot forge it', async (t) => {
  const { key } = await accountWithKey(ports.admin, 'pro');
  const accessLines = () => portico.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request');
  const before = accessLines().length;
  await api(ports.https, ca, key, { path: '/v1/categories', headers: { 'x-forwarded-for': '203.0.113.9, 127.0.0.1' } });
  // the access line is written once the answer has gone out, which may be just after the client has it
  for (let waited = 0; accessLines().length === before && waited < 2000; waited += 10) await new Promise((r) => setTimeout(r, 10));
  const line = accessLines().at(-1);
  t.equal(line.clientIp, '203.0.113.9', 'right-most untrusted hop');
  const anonymous = await api(ports.https, ca, null, { path: '/v1/categories', headers: { 'x-forwarded-for': '198.51.100.1' } });
  t.equal(anonymous.headers['x-ratelimit-remaining'], '59', 'anonymous calls are counted per forwarded client IP');
});

t.test('slow clients cannot hold sockets', async (t) => {
  const dir = tempDir('config');
  const file = path.join(dir, 'portico.yaml');
  writeFileSync(file, readFileSync('config/portico.yaml', 'utf8').replace('headersMs: 10000', 'headersMs: 400').replace('requestMs: 60000', 'requestMs: 800').replace('keepAliveMs: 5000', 'keepAliveMs: 600'));
  const slow = await startPortico({ PORTICO_CONFIG: file });
  t.teardown(() => slow.stop());
  const socket = net.connect(slow.ports.https, '127.0.0.1');
  const closed = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), 15_000);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(true);
    });
    socket.on('error', () => undefined);
    socket.write(Buffer.from([0x16, 0x03, 0x01])); // the start of a ClientHello, then nothing
  });
  t.ok(closed, 'a stalled handshake is closed within the handshake timeout');

  // the bounds are under the defaults this file overrides (headersMs 10 s, keepAliveMs 5 s) and far
  // over the settings (400 ms, 600 ms), for a loaded machine
  const started = Date.now();
  const cut = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), 20_000);
    const tlsSocket = tls.connect({ host: '127.0.0.1', port: slow.ports.https, servername: 'api.localhost', ca: slow.ca, ALPNProtocols: ['http/1.1'] }, () => {
      // a request line and one header, then silence (slowloris)
      tlsSocket.write('GET /v1/categories HTTP/1.1\r\nHost: api.localhost\r\n');
    });
    tlsSocket.on('close', () => {
      clearTimeout(timer);
      resolve(true);
    });
    tlsSocket.on('error', () => undefined);
  });
  t.ok(cut, 'HTTP/1.1: a request that never finishes its headers is closed');
  t.ok(Date.now() - started < 8_000, `HTTP/1.1: closed after ${Date.now() - started} ms (headersMs 400)`);

  const session = http2.connect(`https://api.localhost:${slow.ports.https}`, { ca: slow.ca, host: '127.0.0.1' } as http2.SecureClientSessionOptions);
  session.on('error', () => undefined);
  const idleStarted = Date.now();
  const closed2 = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), 20_000);
    session.on('close', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
  t.ok(closed2, 'HTTP/2: an idle session is closed');
  t.ok(Date.now() - idleStarted < 4_000, `HTTP/2: closed after ${Date.now() - idleStarted} ms`);
});
