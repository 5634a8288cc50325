// An HTTP/1.1 WebSocket lives as long as its two sides keep it: the listener's deadline for request
// headers (headersMs, against slowloris) cut every one of them after headersMs, quiet or busy, and a
// graceful stop cut them at once, where a WebSocket over HTTP/2 got the shutdown time.
// A real Portico, a real `ws` client and a real `ws` echo upstream.
import t from 'tap';
import path from 'node:path';
import { readFileSync, writeFileSync } from 'node:fs';
import { WebSocket, type ClientOptions } from 'ws';
import { startPortico, tempDir, cleanup } from '../helpers/portico.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { admin, accountWithKey } from '../helpers/client.ts';

const HEADERS_MS = 500;
const SHUTDOWN_MS = 2_000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const dir = tempDir('ws-lifetime');
t.teardown(() => cleanup(dir));
const configFile = path.join(dir, 'portico.yaml');
writeFileSync(configFile, readFileSync('config/portico.yaml', 'utf8').replace('headersMs: 10000', `headersMs: ${HEADERS_MS}`).replace('shutdownMs: 10000', `shutdownMs: ${SHUTDOWN_MS}`));

const upstream = await startUpstream();
t.teardown(() => upstream.stop());
const portico = await startPortico({ PORTICO_CONFIG: configFile });
let stopped = false;
t.teardown(async () => {
  if (!stopped) await portico.stop();
  cleanup(portico.dataDir, portico.certsDir);
});
const owner = await accountWithKey(portico.ports.admin, 'business');
await admin(portico.ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'live', upstream: upstream.url });

async function open(): Promise<WebSocket> {
  const ws = new WebSocket(`wss://127.0.0.1:${portico.ports.https}/ws`, { servername: 'live.localhost', headers: { host: 'live.localhost' }, ca: portico.ca, checkServerIdentity: () => undefined } as unknown as ClientOptions);
  ws.on('error', () => undefined);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  return ws;
}

const echo = (ws: WebSocket, text: string) =>
  new Promise<string>((resolve, reject) => {
    if (ws.readyState !== WebSocket.OPEN) return reject(new Error(`closed before ${text}`));
    ws.once('message', (data: Buffer) => resolve(data.toString()));
    ws.once('close', () => reject(new Error(`closed before the echo of ${text}`)));
    ws.send(text);
  });

t.test(`a WebSocket outlives headersMs (${HEADERS_MS} ms) many times over, busy or quiet`, async (t) => {
  const ws = await open();
  let closedAt = 0;
  const started = Date.now();
  ws.once('close', () => (closedAt = Date.now()));
  const echoes: string[] = [];
  for (let i = 0; i < 10; i++) {
    echoes.push(await echo(ws, `m${i}`).catch((err: Error) => err.message));
    await sleep(200);
  }
  t.same(echoes, Array.from({ length: 10 }, (_, i) => `m${i}`), 'a message every 200 ms for 2 s: every one echoed');
  await sleep(4 * HEADERS_MS);
  t.equal(closedAt, 0, 'still open after a quiet spell');
  t.equal(await echo(ws, 'after the quiet').catch((err: Error) => err.message), 'after the quiet');
  t.ok(Date.now() - started > 8 * HEADERS_MS, `open for ${Date.now() - started} ms`);
  ws.close();
});

t.test('a graceful stop leaves an open WebSocket its shutdown time, as over HTTP/2', async (t) => {
  const ws = await open();
  t.equal(await echo(ws, 'before the stop'), 'before the stop');
  const closed = new Promise<number>((resolve) => ws.once('close', () => resolve(Date.now())));
  const since = Date.now();
  stopped = true;
  const stopping = portico.stop();
  await sleep(300);
  t.equal(await echo(ws, 'while stopping').catch((err: Error) => err.message), 'while stopping', 'still carries messages while Portico stops');
  const lived = (await closed) - since;
  await stopping;
  t.ok(lived >= SHUTDOWN_MS / 2, `cut after ${lived} ms of the ${SHUTDOWN_MS} ms shutdown time, not at once`);
});
