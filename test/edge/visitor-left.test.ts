// A visitor that leaves before any answer (an HTTP/2 stream cancelled, an HTTP/1.1 connection
// closed) is 499 with `aborted` in its access line and count, on every path a request can take: the
// HTTP/2 fast path, the compatibility path (`Expect`), and HTTP/1.1. Before, such requests were
// written down as 200, as if they had been answered.
import t from 'tap';
import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import tls from 'node:tls';
import { setTimeout as sleep } from 'node:timers/promises';
import { startProjectBed } from '../helpers/project-bed.ts';
import { parseExposition, scrape, sum } from '../helpers/prometheus.ts';

// the upstream holds /silent/* without answering (until the test ends) and answers anything else
const held = new Set<string>();
const waiting: http.ServerResponse[] = [];
const { portico, hostname: HOSTNAME } = await startProjectBed(t, 'left', (req, res) => {
  if (req.url?.startsWith('/silent/')) {
    held.add(req.url);
    waiting.push(res);
    return;
  }
  req.resume();
  res.end('ok');
});
t.teardown(() => {
  for (const res of waiting) res.destroy();
});
const { ports, ca } = portico;

const until = async (what: string, check: () => boolean) => {
  for (const deadline = Date.now() + 5_000; !check(); await sleep(10)) if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
};
const lines = (linePath: string) => portico.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'request' && entry.path === linePath);
async function accessLine(linePath: string): Promise<Record<string, unknown>> {
  await until(`the access line of ${linePath}`, () => lines(linePath).length > 0);
  await sleep(100);
  const found = lines(linePath);
  if (found.length !== 1) throw new Error(`${found.length} access lines for ${linePath}`);
  return found[0];
}
const counted = async (status: string) => sum(parseExposition(await scrape(ports.admin)), 'portico_http_requests_total', { route: 'project', status });

function h2(): http2.ClientHttp2Session {
  const session = http2.connect(`https://127.0.0.1:${ports.https}`, { ca, servername: HOSTNAME, checkServerIdentity: () => undefined });
  session.on('error', () => undefined);
  return session;
}

t.test('an HTTP/2 stream cancelled before the answer: 499, aborted (fast path and Expect)', async (t) => {
  const before = await counted('499');
  const session = h2();
  t.teardown(() => session.close());
  for (const [target, extra] of [['/silent/fast', {}], ['/silent/compat', { expect: '100-continue' }]] as const) {
    const stream = session.request({ ':method': 'POST', ':path': target, ':authority': HOSTNAME, 'content-length': '3', ...extra });
    stream.on('error', () => undefined);
    stream.end('abc');
    await until(`the upstream to hold ${target}`, () => held.has(target));
    stream.close(http2.constants.NGHTTP2_CANCEL);
    t.match(await accessLine(target), { status: 499, aborted: true, route: 'project', protocol: '2.0' }, `${target}: 499, aborted`);
  }
  t.equal(await counted('499') - before, 2, 'counted as 499, not 200');
});

t.test('an HTTP/1.1 connection closed before the answer: 499, aborted', async (t) => {
  const before = await counted('499');
  const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: HOSTNAME, ca, checkServerIdentity: () => undefined, ALPNProtocols: ['http/1.1'] });
  socket.on('error', () => undefined);
  await new Promise((resolve) => socket.once('secureConnect', resolve));
  socket.write(`GET /silent/h1 HTTP/1.1\r\nHost: ${HOSTNAME}\r\n\r\n`);
  await until('the upstream to hold /silent/h1', () => held.has('/silent/h1'));
  socket.destroy();
  t.match(await accessLine('/silent/h1'), { status: 499, aborted: true, route: 'project', protocol: '1.1' });
  t.equal(await counted('499') - before, 1);
});

t.test('answered requests keep their status and no aborted, over both protocols', async (t) => {
  const session = h2();
  t.teardown(() => session.close());
  for (const [target, extra] of [['/fine/fast', {}], ['/fine/compat', { expect: '100-continue' }]] as const) {
    const stream = session.request({ ':method': 'POST', ':path': target, ':authority': HOSTNAME, 'content-length': '3', ...extra });
    stream.end('abc');
    stream.resume();
    await new Promise((resolve) => stream.once('end', resolve));
    const line = await accessLine(target);
    t.equal(line.status, 200, `${target}: 200`);
    t.notOk('aborted' in line, `${target}: not aborted`);
  }
  const status = await new Promise<number>((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port: ports.https, path: '/fine/h1', servername: HOSTNAME, ca, checkServerIdentity: () => undefined, headers: { host: HOSTNAME } }, (res) => res.resume().on('end', () => resolve(res.statusCode!)));
    req.on('error', reject).end();
  });
  t.equal(status, 200);
  const line = await accessLine('/fine/h1');
  t.equal(line.status, 200, 'HTTP/1.1: 200');
  t.notOk('aborted' in line, 'HTTP/1.1: not aborted');
});
