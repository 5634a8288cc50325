// A stop whose shutdown time runs out cuts the requests still waiting for their upstream. Their
// visitors did not leave: the access line says 503 with `aborted` (the status Portico would have
// answered, as a refusal cut short says 502), not 499 "client closed request". On every path a
// request can take: the HTTP/2 fast path, the compatibility path (`Expect`), and HTTP/1.1.
// A visitor who leaves during the stop's grace time is still 499.
import t from 'tap';
import http from 'node:http';
import http2 from 'node:http2';
import path from 'node:path';
import tls from 'node:tls';
import { readFileSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { startPortico, tempDir, cleanup } from '../helpers/portico.ts';
import { admin, accountWithKey } from '../helpers/client.ts';

const SHUTDOWN_MS = 1_000;
const HOSTNAME = 'cut.localhost';

// the upstream holds every request without answering, until the test ends
const held = new Set<string>();
const waiting: http.ServerResponse[] = [];
const upstream = http.createServer((req, res) => {
  held.add(req.url ?? '');
  waiting.push(res);
});
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
t.teardown(() => {
  for (const res of waiting) res.destroy();
  upstream.closeAllConnections();
  return new Promise((resolve) => upstream.close(resolve));
});

const dir = tempDir('stop-cut');
t.teardown(() => cleanup(dir));
const configFile = path.join(dir, 'portico.yaml');
writeFileSync(configFile, readFileSync('config/portico.yaml', 'utf8').replace('shutdownMs: 10000', `shutdownMs: ${SHUTDOWN_MS}`));
const portico = await startPortico({ PORTICO_CONFIG: configFile });
let stopped = false;
t.teardown(async () => {
  if (!stopped) await portico.stop();
  cleanup(portico.dataDir, portico.certsDir);
});
const owner = await accountWithKey(portico.ports.admin, 'business');
const made = await admin(portico.ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'cut', upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` });
if (made.status !== 201) throw new Error(`project: ${made.status} ${made.text}`);
const { ports, ca } = portico;

const until = async (what: string, check: () => boolean) => {
  for (const deadline = Date.now() + 5_000; !check(); await sleep(10)) if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
};
const linesOf = (target: string) => portico.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'request' && entry.path === target);
// access lines are written in batches, at least every 250 ms
async function lineOf(target: string): Promise<Record<string, unknown>> {
  await until(`the access line of ${target}`, () => linesOf(target).length > 0);
  await sleep(300);
  const found = linesOf(target);
  if (found.length !== 1) throw new Error(`${found.length} access lines for ${target}`);
  return found[0];
}

t.test(`requests still waiting when the shutdown time (${SHUTDOWN_MS} ms) runs out: 503, aborted`, async (t) => {
  const session = http2.connect(`https://127.0.0.1:${ports.https}`, { ca, servername: HOSTNAME, checkServerIdentity: () => undefined });
  session.on('error', () => undefined);
  const streams = (['/held/fast', '/held/compat', '/left/fast'] as const).map((target) => {
    const stream = session.request({ ':method': 'POST', ':path': target, ':authority': HOSTNAME, 'content-length': '3', ...(target === '/held/compat' ? { expect: '100-continue' } : {}) });
    stream.on('error', () => undefined);
    stream.end('abc');
    return stream;
  });
  const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: HOSTNAME, ca, checkServerIdentity: () => undefined, ALPNProtocols: ['http/1.1'] });
  socket.on('error', () => undefined);
  await new Promise((resolve) => socket.once('secureConnect', resolve));
  socket.write(`GET /held/h1 HTTP/1.1\r\nHost: ${HOSTNAME}\r\n\r\n`);
  await until('the upstream to hold every request', () => ['/held/fast', '/held/compat', '/left/fast', '/held/h1'].every((target) => held.has(target)));

  const stopping = portico.stop();
  stopped = true;
  // during the grace time a visitor gives up on one: that one left
  await sleep(200);
  streams[2].close(http2.constants.NGHTTP2_CANCEL);
  const begun = Date.now();
  await stopping;
  t.ok(Date.now() - begun >= SHUTDOWN_MS / 2, 'the stop waited for its shutdown time');
  socket.destroy();
  session.destroy();

  t.match(await lineOf('/held/fast'), { status: 503, aborted: true, route: 'project', protocol: '2.0' }, 'HTTP/2 fast path: 503, aborted');
  t.match(await lineOf('/held/compat'), { status: 503, aborted: true, route: 'project', protocol: '2.0' }, 'HTTP/2 compatibility path: 503, aborted');
  t.match(await lineOf('/held/h1'), { status: 503, aborted: true, route: 'project', protocol: '1.1' }, 'HTTP/1.1: 503, aborted');
  t.match(await lineOf('/left/fast'), { status: 499, aborted: true }, 'the visitor who cancelled during the grace time: 499');
});
