// A project's HTTP/2 requests, served on Node's core stream API (src/proxy/forward-h2.ts), through the
// real edge with Node's http2 client: what crosses each way, pages, abort, and flow control end to
// end (a visitor that stops reading makes Portico stop reading the upstream; what it holds is bounded).
import t from 'tap';
import http from 'node:http';
import http2 from 'node:http2';
import tls from 'node:tls';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { startPortico, tempDir } from '../helpers/portico.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { admin, accountWithKey } from '../helpers/client.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
// an upstream silent for 400 ms → 504 (the shipped 30 s would make the test wait)
const configFile = path.join(tempDir('h2-config'), 'portico.yaml');
writeFileSync(configFile, readFileSync(path.join(ROOT, 'config/portico.yaml'), 'utf8').replace(/upstreamMs: \d+/, 'upstreamMs: 400'));

const upstream = await startUpstream();
t.teardown(() => upstream.stop());
// its own upstream for the abort test, so no idle keep-alive socket of another test is counted there
const aborted = await startUpstream();
t.teardown(() => aborted.stop());

// an upstream that counts what it managed to hand to its socket: /big?mib=N writes N MiB in 64 KiB
// chunks, waiting for 'drain' whenever write() says the socket is full
let written = 0;
const counting = http.createServer((req, res) => {
  const total = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('mib') ?? '1') * 1024 * 1024;
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': total });
  const chunk = Buffer.alloc(64 * 1024, 1);
  let sent = 0;
  const pump = () => {
    while (sent < total) {
      sent += chunk.length;
      written += chunk.length;
      if (!res.write(chunk)) {
        res.once('drain', pump);
        return;
      }
    }
    res.end();
  };
  res.on('close', () => res.off('drain', pump));
  pump();
});
await new Promise<void>((resolve) => counting.listen(0, '127.0.0.1', resolve));
t.teardown(() => new Promise<void>((resolve) => { counting.closeAllConnections(); counting.close(() => resolve()); }));

const portico = await startPortico({ PORTICO_CONFIG: configFile });
t.teardown(() => portico.stop());
const { ports } = portico;
const owner = await accountWithKey(ports.admin, 'business');
await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'site', upstream: upstream.url });
await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'gone', upstream: 'http://127.0.0.1:9' });
await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'cancel', upstream: aborted.url });
await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'bulk', upstream: `http://127.0.0.1:${(counting.address() as AddressInfo).port}` });

/** an h2 session whose SNI is `hostname` (the fallback certificate names localhost) */
function connect(hostname: string, settings: http2.Settings = {}): http2.ClientHttp2Session {
  const session = http2.connect(`https://localhost:${ports.https}`, { ca: portico.ca, servername: hostname, settings, checkServerIdentity: (_host, cert) => tls.checkServerIdentity('localhost', cert) });
  session.on('error', () => undefined);
  return session;
}

interface H2Answer {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: Buffer;
}

function request(session: http2.ClientHttp2Session, hostname: string, headers: http2.OutgoingHttpHeaders, body?: Buffer): Promise<H2Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':authority': hostname, ...headers });
    const chunks: Buffer[] = [];
    let answer: http2.IncomingHttpHeaders = {};
    stream.on('response', (h) => (answer = h));
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve({ status: Number(answer[':status']), headers: answer, body: Buffer.concat(chunks) }));
    stream.on('error', reject);
    stream.end(body);
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const site = connect('site.localhost');
t.teardown(() => site.close());

t.test('what reaches the upstream: no pseudo-headers, Portico\'s forwarding headers, the client\'s dropped', async (t) => {
  const answer = await request(site, 'site.localhost', { ':path': '/echo?q=1', 'x-forwarded-for': '203.0.113.9', forwarded: 'for=203.0.113.9', 'x-real-ip': '203.0.113.9', 'x-forwarded-port': '1', 'x-custom': 'kept', cookie: 'a=1' });
  t.equal(answer.status, 200);
  const seen = JSON.parse(answer.body.toString());
  t.equal(seen.url, '/echo?q=1');
  t.equal(seen.method, 'GET');
  t.equal(seen.httpVersion, '1.1');
  t.notOk(Object.keys(seen.headers).some((name) => name.startsWith(':')), 'no pseudo-header upstream');
  t.equal(seen.headers['x-forwarded-for'], '127.0.0.1', 'the TCP peer, not what the client claimed');
  t.equal(seen.headers['x-forwarded-proto'], 'https');
  t.equal(seen.headers['x-forwarded-host'], 'site.localhost');
  t.equal(seen.headers.forwarded, undefined);
  t.equal(seen.headers['x-real-ip'], undefined);
  t.equal(seen.headers['x-forwarded-port'], undefined);
  t.equal(seen.headers['x-custom'], 'kept');
  t.equal(seen.headers.cookie, 'a=1');
  // cookie crumbs (RFC 9113 §8.2.3) reach an HTTP/1.1 upstream as one field, joined with '; '
  const crumbs = JSON.parse((await request(site, 'site.localhost', { ':path': '/echo', cookie: ['a=1', 'b=2'], 'x-multi': ['one', 'two'] })).body.toString());
  t.equal(crumbs.headers.cookie, 'a=1; b=2');
  t.equal(crumbs.headers['x-multi'], 'one, two', 'a repeated field reaches the upstream as repeated lines');
  t.equal(seen.headers.host, new URL(upstream.url).host, 'Host is the upstream\'s own');
});

t.test('what comes back: no hop-by-hop fields, content-length written by Portico, HEAD has no body', async (t) => {
  const hop = await request(site, 'site.localhost', { ':path': '/hop' });
  t.equal(hop.status, 200);
  for (const name of ['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'proxy-connection']) t.equal(hop.headers[name], undefined, `${name} stays on the upstream hop`);
  const download = await request(site, 'site.localhost', { ':path': '/download?bytes=300000' });
  t.equal(download.body.length, 300_000);
  t.ok(download.body.every((byte, i) => byte === i % 251), 'every byte as the upstream sent it');
  const head = await request(site, 'site.localhost', { ':path': '/echo', ':method': 'HEAD' });
  t.equal(head.status, 200);
  t.equal(head.body.length, 0);
  const upload = await request(site, 'site.localhost', { ':path': '/upload', ':method': 'POST' }, Buffer.alloc(3 * 1024 * 1024, 5));
  t.match(upload.body.toString(), String(3 * 1024 * 1024), 'a request body streams up');
});

t.test('upstream failures: refused → 502 page, silent → 504 page, reset → 502; misdirected → 421', async (t) => {
  const gone = connect('gone.localhost');
  t.teardown(() => gone.close());
  const refused = await request(gone, 'gone.localhost', { ':path': '/' });
  t.equal(refused.status, 502);
  t.match(refused.headers['content-type'], /text\/html/);
  t.match(refused.body.toString(), /not answering/);
  const silent = await request(site, 'site.localhost', { ':path': '/slow?ms=3000' });
  t.equal(silent.status, 504);
  t.match(silent.body.toString(), /took too long/);
  const reset = await request(site, 'site.localhost', { ':path': '/reset' });
  t.equal(reset.status, 502);
  const misdirected = await request(site, 'gone.localhost', { ':path': '/' });
  t.equal(misdirected.status, 421, 'a hostname other than the SNI still gets 421');
});

t.test('the visitor resetting its stream closes the upstream request', async (t) => {
  const session = connect('cancel.localhost');
  t.teardown(() => session.close());
  const stream = session.request({ ':authority': 'cancel.localhost', ':path': '/download?bytes=10000000&gate=1' });
  stream.on('error', () => undefined);
  await new Promise((resolve) => stream.once('data', resolve));
  t.equal(aborted.openSockets, 1, 'the download holds an upstream socket');
  stream.close(http2.constants.NGHTTP2_CANCEL);
  // well under the pool's 4 s idle close: the socket goes because the exchange was aborted
  await aborted.drained(2000);
  t.equal(aborted.openSockets, 0, 'its upstream socket is closed');
});

t.test('flow control end to end: a stalled visitor stops the upstream; what Portico holds is bounded', async (t) => {
  // the client's windows stay small, and it never reads: its window shuts, Portico's stream fills,
  // the upstream connection is paused, and the upstream's socket fills
  const stalled = connect('bulk.localhost', { initialWindowSize: 65_535 });
  t.teardown(() => stalled.destroy());
  const streams = Array.from({ length: 20 }, () => {
    const stream = stalled.request({ ':authority': 'bulk.localhost', ':path': '/big?mib=64' });
    stream.on('error', () => undefined);
    stream.pause();
    return stream;
  });
  await new Promise((resolve) => streams[0].once('response', resolve));
  // settled when the upstream has written nothing more for 500 ms
  let last = -1;
  for (let i = 0; i < 40 && written !== last; i++) {
    last = written;
    await sleep(500);
  }
  t.equal(written, last, 'the upstream stopped writing while the visitor does not read');
  const perStream = written / streams.length;
  // socket buffers on both loopback sides, Portico's stream buffer and the h2 window: a few MiB at
  // most, against the 64 MiB each stream asked for
  t.ok(perStream < 8 * 1024 * 1024, `${(perStream / 1024 / 1024).toFixed(1)} MiB left the upstream per stalled stream`);
  // reading again delivers the whole body of one stream
  const one = streams[0];
  let received = 0;
  one.on('data', (c: Buffer) => { received += c.length; });
  await new Promise((resolve, reject) => { one.once('end', resolve); one.once('error', reject); one.resume(); });
  t.equal(received, 64 * 1024 * 1024, 'every byte arrives once the visitor reads');
  for (const stream of streams) stream.close(http2.constants.NGHTTP2_CANCEL);
});

t.test('counted and logged like every request: metrics by route, an access line with protocol 2.0', async (t) => {
  await request(site, 'site.localhost', { ':path': '/echo?logged=1' });
  await sleep(400);
  const line = portico.logs.find((l) => l.includes('/echo') && l.includes('"protocol":"2.0"') && l.includes('"route":"project"'));
  t.ok(line, 'an access line for the HTTP/2 request');
  t.notMatch(line ?? '', /logged=1/, 'the query is not logged');
  const metrics = await fetch(`http://127.0.0.1:${ports.admin}/metrics`).then((r) => r.text());
  t.match(metrics, /portico_http_requests_total\{route="project",method="GET",status="200"\} \d+/);
});
