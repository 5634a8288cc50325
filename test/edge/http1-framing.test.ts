// HTTP/1.1 framing as RFC 9112 asks, over raw TLS sockets (and plain TCP for the HTTP listener), so
// the bytes are exactly the ones written here: two Host fields → 400, an absolute-form target routes
// by its authority, and the request-smuggling probes Node's parser refuses stay refused.
import t from 'tap';
import net from 'node:net';
import tls from 'node:tls';
import { startPortico } from '../helpers/portico.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { admin, accountWithKey } from '../helpers/client.ts';
import { afterContinue, converse } from '../helpers/conversation.ts';

const upstream = await startUpstream();
t.teardown(() => upstream.stop());
const portico = await startPortico({ PORTICO_PUBLIC_HTTPS_PORT: '443' });
t.teardown(() => portico.stop());
const { ports, ca } = portico;
const owner = await accountWithKey(ports.admin, 'business');
await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'site', upstream: upstream.url });
await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'other', upstream: upstream.url });

/** writes `text` on a fresh connection, returns everything read until the server closes (or 3 s) */
function exchange(text: string, options: { servername?: string; plain?: boolean } = {}): Promise<string> {
  return new Promise((resolve) => {
    const socket = options.plain
      ? net.connect(ports.http, '127.0.0.1', () => socket.write(text))
      : tls.connect({ host: '127.0.0.1', port: ports.https, servername: options.servername ?? 'site.localhost', ca, checkServerIdentity: () => undefined, ALPNProtocols: ['http/1.1'] }, () => socket.write(text));
    let answer = '';
    const timer = setTimeout(() => socket.destroy(), 3_000);
    socket.on('data', (chunk) => (answer += chunk));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(answer);
    });
  });
}

const statusLines = (answer: string) => answer.match(/^HTTP\/1\.1 \d{3}/gm) ?? [];
const bodyOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));

t.test('rfc9112-two-host-fields: two Host field lines → 400, whichever comes first', async (t) => {
  for (const hosts of [['site.localhost', 'other.localhost'], ['other.localhost', 'site.localhost'], ['site.localhost', 'site.localhost']]) {
    const answer = await exchange(`GET /echo HTTP/1.1\r\nHost: ${hosts[0]}\r\nhost: ${hosts[1]}\r\n\r\n`);
    t.match(answer, /^HTTP\/1\.1 400 /, `Host: ${hosts.join(' + ')} → 400`);
    t.equal(bodyOf(answer).code, 'invalid_request');
    t.match(bodyOf(answer).message, /one Host header field/);
    t.match(answer, /\r\nconnection: close\r\n/i, 'and the connection closes');
  }
  const upgrade = await exchange('GET /ws HTTP/1.1\r\nHost: site.localhost\r\nHost: other.localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n');
  t.match(upgrade, /^HTTP\/1\.1 400 /, 'a WebSocket upgrade with two Hosts → 400');
  t.equal(upstream.wsRequests.length, 0, 'and never reaches the upstream');
  const plain = await exchange('GET /x HTTP/1.1\r\nHost: site.localhost\r\nHost: other.localhost\r\n\r\n', { plain: true });
  t.match(plain, /^HTTP\/1\.1 400 /, 'the HTTP listener refuses them too');
});

t.test('rfc9112-absolute-form: the target\'s authority routes, the Host field is ignored', async (t) => {
  const answer = await exchange('GET https://site.localhost/echo?x=1 HTTP/1.1\r\nHost: other.localhost\r\nConnection: close\r\n\r\n');
  t.match(answer, /^HTTP\/1\.1 200 /, 'answered by the authority\'s project, not 421');
  const seen = bodyOf(answer);
  t.equal(seen.url, '/echo?x=1', 'the upstream gets the origin-form path and query');
  t.equal(seen.headers['x-forwarded-host'], 'site.localhost', 'the visitor\'s hostname is the authority');
  t.equal(seen.headers.host, `127.0.0.1:${upstream.port}`, 'Host upstream is the upstream\'s own');

  const query = await exchange('GET http://SITE.localhost:443?q=1 HTTP/1.1\r\nHost: site.localhost\r\nConnection: close\r\n\r\n');
  t.match(query, /^HTTP\/1\.1 404 /, 'http scheme, port and an empty path are accepted: / on the upstream is its 404…');
  t.notMatch(query, /does not serve/, '…not Portico\'s page for an unknown hostname');

  const misdirected = await exchange('GET https://other.localhost/echo HTTP/1.1\r\nHost: site.localhost\r\nConnection: close\r\n\r\n');
  t.match(misdirected, /^HTTP\/1\.1 421 /, 'the SNI rule applies to the authority: another name than the SNI → 421');
  t.equal(bodyOf(misdirected).code, 'misdirected_request');

  for (const target of ['https://user@site.localhost/echo', 'ftp://site.localhost/echo', 'https:///echo', 'site.localhost/echo']) {
    const refused = await exchange(`GET ${target} HTTP/1.1\r\nHost: site.localhost\r\nConnection: close\r\n\r\n`);
    t.match(refused, /^HTTP\/1\.1 400 /, `${target} → 400`);
  }

  const redirect = await exchange('GET http://shop.example.com/cart?id=2 HTTP/1.1\r\nHost: other.example\r\nConnection: close\r\n\r\n', { plain: true });
  t.match(redirect, /^HTTP\/1\.1 308 /, 'on the HTTP listener an absolute-form target redirects…');
  t.match(redirect, /\r\nlocation: https:\/\/shop\.example\.com\/cart\?id=2\r\n/i, '…to its own authority, path and query');
});

t.test('an HTTP/0.9 request line (no version) is 400 on both listeners, never routed', async (t) => {
  for (const plain of [false, true]) {
    for (const text of ['GET /echo\r\n\r\n', 'GET /echo\r\nHost: site.localhost\r\n\r\n']) {
      const answer = await exchange(text, { plain });
      const name = `${plain ? 'http' : 'https'} ${JSON.stringify(text)}`;
      t.match(answer, /^HTTP\/1\.1 400 /, `${name} → 400 (was 421 without Host, the upstream's 200 with one)`);
      t.match(answer, /HTTP\/0\.9 requests are not served/, `${name}: saying why`);
      t.notMatch(answer, /"url":"\/echo"/, `${name}: nothing from the upstream`);
    }
  }
});

// Each probe below is refused by Node's parser (llhttp) before Portico sees a request: these tests
// keep it that way if the listener or its options change. Each carries a second, smuggled request
// that must never be answered.
const SMUGGLED = 'GET /echo?smuggled=1 HTTP/1.1\r\nHost: site.localhost\r\n\r\n';
const PROBES: Record<string, string> = {
  'smuggling-cl-te: Content-Length with Transfer-Encoding': `POST /echo HTTP/1.1\r\nHost: site.localhost\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`,
  'smuggling-te-cl: Transfer-Encoding before Content-Length': `POST /echo HTTP/1.1\r\nHost: site.localhost\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n${SMUGGLED}`,
  'smuggling-duplicate-content-length: two different Content-Lengths': `POST /echo HTTP/1.1\r\nHost: site.localhost\r\nContent-Length: 0\r\nContent-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
  'smuggling-duplicate-content-length: the same Content-Length twice': `POST /echo HTTP/1.1\r\nHost: site.localhost\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n${SMUGGLED}`,
  'smuggling-obs-fold: a folded header line': `GET /echo HTTP/1.1\r\nHost: site.localhost\r\nX-Folded: a\r\n Content-Length: 40\r\n\r\n${SMUGGLED}`,
  'smuggling-bare-lf: lines ended by LF alone': `GET /echo HTTP/1.1\nHost: site.localhost\n\n${SMUGGLED}`,
  'smuggling-nul: a NUL byte in a field value': `GET /echo HTTP/1.1\r\nHost: site.localhost\r\nX-Value: a\0b\r\n\r\n${SMUGGLED}`,
};

t.test('a Host field that is not host[:port] names no site: never routed to the host inside it', async (t) => {
  for (const host of ['site.localhost/x', 'evil@site.localhost', 'site.localhost?x', 'site.localhost#x', 'site.localhost\\x']) {
    const answer = await exchange(`GET /echo HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`, { plain: true });
    t.notMatch(answer, /^HTTP\/1\.1 [23]\d\d /, `Host: ${host} → not served (${answer.split('\r\n', 1)[0]})`);
    t.notMatch(answer, /"url":"\/echo"/, `Host: ${host}: nothing from the upstream`);
  }
  const fine = await exchange('GET /echo HTTP/1.1\r\nHost: Site.Localhost.\r\nConnection: close\r\n\r\n', { plain: true });
  t.notMatch(fine, /^HTTP\/1\.1 4\d\d /, 'case and a trailing dot still name the site');
});

t.test('smuggling probes answer 400 and close, never reaching the upstream', async (t) => {
  for (const [name, text] of Object.entries(PROBES)) {
    const answer = await exchange(text);
    t.match(answer, /^HTTP\/1\.1 400 Bad Request\r\n/, `${name} → 400`);
    t.match(answer, /\r\nConnection: close\r\n/i, `${name}: the connection closes`);
    t.match(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)), { code: 'invalid_request', status: 400, message: /not valid HTTP\/1\.1/ }, `${name}: an Error body`);
    t.equal(statusLines(answer).length, 1, `${name}: one answer, the smuggled request is not read`);
    t.notMatch(answer, /smuggled/, `${name}: nothing from the upstream`);
  }
});

/** one whole answer with a Content-Length has been read */
function complete(answer: string): boolean {
  const end = answer.indexOf('\r\n\r\n');
  const length = /\r\ncontent-length: (\d+)\r\n/i.exec(answer.slice(0, end + 2));
  return end !== -1 && length !== null && Buffer.byteLength(answer.slice(end + 4)) >= Number(length[1]);
}

t.test('a malformed request on a keep-alive connection whose answers are out gets its 400; behind an answer still coming, none', async (t) => {
  const reused = (plain: boolean, malformed: string) =>
    plain
      ? converse({ port: ports.http }, 'GET /x HTTP/1.1\r\nHost: site.localhost\r\n\r\n', (text) => (complete(text) ? malformed : undefined))
      : converse({ port: ports.https, servername: 'site.localhost', ca }, 'GET /echo HTTP/1.1\r\nHost: site.localhost\r\n\r\n', (text) => (complete(text) ? malformed : undefined));
  for (const plain of [false, true]) {
    const where = plain ? 'the HTTP listener' : 'HTTPS';
    // and a fault in the body of the request being answered: its answer has not started
    const badChunk = 'POST /echo HTTP/1.1\r\nHost: site.localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nsmuggled\r\n0\r\n\r\n';
    for (const [name, text] of [...Object.entries(PROBES), ['a chunk size that is not hex', badChunk]]) {
      const answer = await reused(plain, text);
      // the 400 follows the first answer's body on the same line
      t.same([...answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => m[1]), [plain ? '308' : '200', '400'], `${where}, ${name}: the first answer, then 400`);
      t.match(answer.slice(answer.lastIndexOf('HTTP/1.1 400')), /\r\nConnection: close\r\n[^]*not valid HTTP\/1\.1/i, `${where}, ${name}: an Error body, and the connection closes`);
      t.notMatch(answer, /smuggled/, `${where}, ${name}: nothing from the upstream`);
    }
  }
  // pipelined behind a request whose answer is still being made: a 400 now would be read as its answer
  const pipelined = await exchange(`GET /slow?ms=300 HTTP/1.1\r\nHost: site.localhost\r\n\r\n${PROBES['smuggling-nul: a NUL byte in a field value']}`);
  t.same(statusLines(pipelined), [], 'no 400 in place of the valid request\'s answer; the connection closes');
});

t.test('a request without Host names no site: 400 saying so, over HTTPS and on the HTTP listener', async (t) => {
  for (const version of ['1.0', '1.1']) {
    const answer = await exchange(`GET /echo HTTP/${version}\r\n\r\n`);
    t.match(answer, /^HTTP\/1\.1 400 /, `HTTP/${version} over HTTPS → 400, not 421`);
    t.match(bodyOf(answer).message, /Host header field/, 'and the body says what is missing');
    const plain = await exchange(`GET /x HTTP/${version}\r\n\r\n`, { plain: true });
    t.match(plain, /^HTTP\/1\.1 400 /, `HTTP/${version} on the HTTP listener → 400, not a redirect to a host-less URL`);
    t.notMatch(plain, /location:/i);
  }
  t.match(await exchange('GET https://site.localhost/echo HTTP/1.0\r\n\r\n'), /^HTTP\/1\.1 200 /, 'an absolute-form target names the site itself');
});

t.test('Expect: 100-continue on a forwarded upload: 100 once the body goes up, then the upstream\'s answer', async (t) => {
  const body = 'x'.repeat(100_000);
  const head = `POST /upload HTTP/1.1\r\nHost: site.localhost\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n`;
  const answer = await converse({ port: ports.https, servername: 'site.localhost', ca }, head, afterContinue(body));
  t.same([...answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => m[1]), ['100', '200'], 'the 100, then the upstream\'s 200');
  t.match(answer, /"bytes":100000/, 'the whole body went up');
});
