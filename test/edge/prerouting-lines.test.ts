// What the HTTPS listener refuses before routing — a request or an upgrade with two Host fields, no
// Host, a target that is neither a path nor an http(s) URI; over HTTP/2 a Host naming another site than
// :authority — was counted but had no access line, and a plain CONNECT over HTTP/1.1 had neither (and
// its 405 no `Allow`, RFC 9110 §15.5.6). Each now has its count and one line, route `unknown`.
// A real Portico, raw HTTP/1.1 over TLS with SNI, and Node's HTTP/2 client.
import t from 'tap';
import tls from 'node:tls';
import http2 from 'node:http2';
import { startPortico, cleanup } from '../helpers/portico.ts';
import { parseExposition, scrape, sum } from '../helpers/prometheus.ts';

const HOSTNAME = 'shop.localhost';
const KEY = 'dGhlIHNhbXBsZSBub25jZQ==';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const portico = await startPortico();
t.teardown(async () => {
  await portico.stop();
  cleanup(portico.dataDir, portico.certsDir);
});
const { ports, ca } = portico;

const upgrade = (target: string, hostLines: string) =>
  `GET ${target} HTTP/1.1\r\n${hostLines}Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${KEY}\r\n\r\n`;
const plain = (target: string, hostLines: string) => `GET ${target} HTTP/1.1\r\n${hostLines}\r\n`;

/** one HTTP/1.1 connection: `bytes` written, everything read until the server closes it (or 3 s) */
function exchange(bytes: string): Promise<{ text: string; closedByServer: boolean }> {
  return new Promise((resolve, reject) => {
    let text = '';
    let byGuard = false;
    const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: HOSTNAME, ca, checkServerIdentity: () => undefined, ALPNProtocols: ['http/1.1'] }, () => socket.write(bytes));
    const guard = setTimeout(() => {
      byGuard = true;
      socket.destroy();
    }, 3_000);
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
    socket.on('error', reject);
    socket.on('close', () => {
      clearTimeout(guard);
      resolve({ text, closedByServer: !byGuard });
    });
  });
}

const head = (text: string) => text.slice(0, text.indexOf('\r\n\r\n')).split('\r\n');
const requests = async (labels: Record<string, string>) => sum(parseExposition(await scrape(ports.admin)), 'portico_http_requests_total', labels);
/** the access lines for `path` once one is written (lines are flushed at least every 250 ms) */
async function accessLines(path: string, method = 'GET'): Promise<Array<Record<string, unknown>>> {
  const lines = () => portico.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'request' && entry.path === path && entry.method === method);
  for (let i = 0; i < 40 && lines().length === 0; i++) await sleep(50);
  return lines();
}

t.test('HTTP/1.1 requests and upgrades refused before routing: the 400, one count and one access line each', async (t) => {
  const cases = [
    ['upgrade, two Host fields', upgrade('/up-two-hosts', `Host: ${HOSTNAME}\r\nHost: other.localhost\r\n`), '/up-two-hosts', HOSTNAME],
    ['upgrade, no Host', upgrade('/up-no-host', ''), '/up-no-host', ''],
    ['upgrade, ftp target', upgrade('ftp://x/up-ftp', `Host: ${HOSTNAME}\r\n`), 'ftp://x/up-ftp', HOSTNAME],
    ['request, two Host fields', plain('/two-hosts', `Host: ${HOSTNAME}\r\nHost: other.localhost\r\n`), '/two-hosts', HOSTNAME],
    ['request, no Host', plain('/no-host', ''), '/no-host', ''],
    ['request, ftp target', plain('ftp://x/ftp', `Host: ${HOSTNAME}\r\n`), 'ftp://x/ftp', HOSTNAME],
  ] as const;
  for (const [name, bytes, path, hostname] of cases) {
    const before = await requests({ route: 'unknown', method: 'GET', status: '400' });
    const answer = await exchange(bytes);
    t.equal(head(answer.text)[0], 'HTTP/1.1 400 Bad Request', `${name}: 400`);
    t.ok(answer.closedByServer, `${name}: the connection closes after it`);
    const lines = await accessLines(path);
    t.match(lines, [{ method: 'GET', hostname, route: 'unknown', status: 400, protocol: '1.1', clientIp: '127.0.0.1' }], `${name}: one access line`);
    t.notOk(lines[0]?.aborted, `${name}: the answer was not cut`);
    t.equal(await requests({ route: 'unknown', method: 'GET', status: '400' }), before + 1, `${name}: counted once`);
  }
});

t.test('HTTP/2: a Host naming another site than :authority gets its 400, one count and one access line', async (t) => {
  const before = await requests({ route: 'unknown', method: 'GET', status: '400' });
  const session = http2.connect(`https://127.0.0.1:${ports.https}`, { servername: HOSTNAME, ca, checkServerIdentity: () => undefined });
  t.teardown(() => session.close());
  const status = await new Promise<number>((resolve, reject) => {
    const stream = session.request({ ':path': '/h2-other-host', ':authority': HOSTNAME, host: 'other.localhost' });
    stream.on('response', (headers) => resolve(Number(headers[':status'])));
    stream.on('error', reject);
    stream.resume();
  });
  t.equal(status, 400);
  t.match(await accessLines('/h2-other-host'), [{ route: 'unknown', status: 400, protocol: '2.0' }]);
  t.equal(await requests({ route: 'unknown', method: 'GET', status: '400' }), before + 1, 'counted once');
});

t.test('a plain CONNECT over HTTP/1.1: 405 with Allow, one count and one access line', async (t) => {
  const before = await requests({ route: 'unknown', method: 'CONNECT', status: '405' });
  const answer = await exchange(`CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n`);
  const lines = head(answer.text);
  t.equal(lines[0], 'HTTP/1.1 405 Method Not Allowed');
  t.ok(lines.some((line) => /^allow:/i.test(line)), 'with Allow');
  t.ok(lines.some((line) => /^connection: close$/i.test(line)), 'with Connection: close');
  t.ok(answer.closedByServer, 'and the connection closes');
  t.match(await accessLines('', 'CONNECT'), [{ method: 'CONNECT', hostname: 'example.com', route: 'unknown', status: 405, protocol: '1.1' }]);
  t.equal(await requests({ route: 'unknown', method: 'CONNECT', status: '405' }), before + 1, 'counted once');
});
