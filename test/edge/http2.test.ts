// HTTP/2 and HTTP/1.1 side by side through the real edge, with real clients: curl (--http2,
// --http1.1), Node's http2 client for large streamed bodies, and h2load for a bounded load run.
import t from 'tap';
import http2 from 'node:http2';
import tls from 'node:tls';
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { startPortico, tempDir } from '../helpers/portico.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { admin, accountWithKey } from '../helpers/client.ts';

const upstream = await startUpstream();
t.teardown(() => upstream.stop());
const portico = await startPortico();
t.teardown(() => portico.stop());
const { ports } = portico;
const caFile = path.join(tempDir('ca'), 'fallback.crt');
writeFileSync(caFile, portico.ca);
const owner = await accountWithKey(ports.admin, 'business');
await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'site', upstream: upstream.url });

function run(command: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(command, args, { timeout: 60_000, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

// *.localhost does not resolve everywhere and a `*.localhost` wildcard is refused by clients: pin
// the address and check the certificate against the name it carries
const curl = (protocol: '--http2' | '--http1.1', hostname: string, pathAndQuery: string, extra: string[] = []) =>
  run('curl', ['-sS', protocol, '-D', '-', '--cacert', caFile, '--resolve', `${hostname}:${ports.https}:127.0.0.1`, '--connect-to', `${hostname}:${ports.https}:localhost:${ports.https}`, ...extra, `https://${hostname}:${ports.https}${pathAndQuery}`]);

t.test('curl negotiates h2 by ALPN, HTTP/1.1 still works, both reach the project', async (t) => {
  for (const protocol of ['--http2', '--http1.1'] as const) {
    const answer = await run('curl', ['-sS', protocol, '-D', '-', '--cacert', caFile, '-H', 'Host: site.localhost', '-w', '\n%{http_version}', `https://localhost:${ports.https}/echo`]);
    t.equal(answer.code, 0, answer.stderr);
    t.equal(answer.stdout.trim().split('\n').at(-1), protocol === '--http2' ? '2' : '1.1', `${protocol} negotiated`);
  }
  // SNI and Host must agree; curl sends both from the URL, here the project's default hostname
  for (const protocol of ['--http2', '--http1.1'] as const) {
    const answer = await curl(protocol, 'api.localhost', '/v1/categories', ['-H', `Authorization: Bearer ${owner.key}`]);
    t.match(answer.stdout, /^HTTP\/(2|1\.1) 200/, `${protocol}: /v1 answers 200`);
    t.match(answer.stdout, /x-ratelimit-limit: 1000/i, `${protocol}: rate-limit headers`);
    if (protocol === '--http2') t.notMatch(answer.stdout, /^connection:/im, 'no Connection header on an HTTP/2 answer');
  }
});

function h2request(session: http2.ClientHttp2Session, headers: http2.OutgoingHttpHeaders, body?: Buffer) {
  return new Promise<{ status: number; headers: http2.IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
    const stream = session.request({ ':authority': 'site.localhost', ...headers });
    const chunks: Buffer[] = [];
    let responseHeaders: http2.IncomingHttpHeaders = {};
    stream.on('response', (h) => (responseHeaders = h));
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve({ status: Number(responseHeaders[':status']), headers: responseHeaders, body: Buffer.concat(chunks) }));
    stream.on('error', reject);
    stream.end(body);
  });
}

t.test('a project over HTTP/2: pseudo-headers never reach the upstream, large bodies stream', async (t) => {
  const session = http2.connect(`https://localhost:${ports.https}`, { ca: portico.ca });
  t.teardown(() => session.close());
  // the certificate is checked for the connection's name (localhost); the request is for site.localhost
  const echo = await h2request(session, { ':path': '/echo?x=1', ':method': 'GET' });
  t.equal(echo.status, 421, 'a request for another hostname than the SNI on this connection is misdirected');

  const site = http2.connect(`https://localhost:${ports.https}`, { ca: portico.ca, servername: 'site.localhost', checkServerIdentity: (_host, cert) => tls.checkServerIdentity('localhost', cert) });
  t.teardown(() => site.close());
  const onSite = (headers: http2.OutgoingHttpHeaders, body?: Buffer) => h2request(site, headers, body);
  const seen = JSON.parse((await onSite({ ':path': '/echo?x=1' })).body.toString());
  t.equal(seen.url, '/echo?x=1');
  t.equal(seen.httpVersion, '1.1', 'upstreams are spoken to over HTTP/1.1');
  t.notOk(Object.keys(seen.headers).some((h) => h.startsWith(':')), 'no pseudo-headers upstream');
  t.equal(seen.headers['x-forwarded-host'], 'site.localhost');

  const size = 8 * 1024 * 1024;
  const upload = await onSite({ ':path': '/upload', ':method': 'POST', 'content-type': 'application/octet-stream' }, Buffer.alloc(size, 7));
  t.equal(upload.status, 200);
  t.match(upload.body.toString(), String(size), 'the upstream received every byte of an 8 MiB upload');
});

t.test('rfc9113-host-authority: a Host field naming another site than :authority → 400, on every route', async (t) => {
  const site = http2.connect(`https://localhost:${ports.https}`, { ca: portico.ca, servername: 'site.localhost', checkServerIdentity: (_host, cert) => tls.checkServerIdentity('localhost', cert) });
  t.teardown(() => site.close());
  for (const host of ['other.localhost', 'site.localhost:8443', 'site.localhost.evil']) {
    const refused = await h2request(site, { ':path': '/echo', host });
    t.equal(refused.status, 400, `:authority site.localhost with Host ${host} → 400`);
    t.equal(JSON.parse(refused.body.toString()).code, 'invalid_request');
    t.match(JSON.parse(refused.body.toString()).message, /RFC 9113 §8\.3\.1/);
  }
  // the API goes through the compatibility layer, not the fast path: the same rule
  const api = await h2request(site, { ':path': '/v1/categories', ':authority': 'api.localhost', host: 'site.localhost', authorization: `Bearer ${owner.key}` });
  t.equal(api.status, 400, 'the API host with a Host field naming the project → 400');
  // the same site written differently is no conflict
  for (const host of ['SITE.localhost', 'site.localhost.', 'site.localhost:443']) {
    const same = await h2request(site, { ':path': '/echo', host });
    t.equal(same.status, 200, `Host ${host} names :authority's site → 200`);
    t.equal(JSON.parse(same.body.toString()).url, '/echo', 'answered by the upstream');
  }
});

t.test('h2load: a bounded HTTP/2 load run completes without errors', async (t) => {
  const check = await run('sh', ['-c', 'command -v h2load']);
  if (check.code !== 0) {
    t.fail('h2load is missing: install Debian nghttp2-client');
    return;
  }
  const big = await accountWithKey(ports.admin, 'enterprise', 'production', { perMinute: 100_000, perDay: 1_000_000 });
  const result = await run('h2load', ['-n', '2000', '-c', '10', '-m', '10', '-H', `authorization: Bearer ${big.key}`, `https://127.0.0.1:${ports.https}/v1/categories`]);
  t.equal(result.code, 0, result.stderr);
  t.match(result.stdout, /requests: 2000 total, 2000 started, 2000 done, \d+ succeeded, 0 failed, 0 errored/);
  t.match(result.stdout, /status codes: 2000 2xx/);
  t.match(result.stdout, /Application protocol: h2/);
});
