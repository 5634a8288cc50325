// `portico serve --workers 2` with Redis: both workers serve the same ports, /metrics sums
// them, a killed worker is replaced while requests keep succeeding, and SIGTERM to the primary stops
// everything and exits 0.
import t from 'tap';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { tempDir, cleanup, ADMIN_TOKEN, killAll, alive } from '../helpers/portico.ts';
import { api, accountWithKey } from '../helpers/client.ts';
import { freePort } from '../helpers/free-port.ts';
import { startRedis } from '../helpers/redis.ts';
import { parseExposition, scrape, sum } from '../helpers/prometheus.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const CLI = path.join(ROOT, 'src/cli/main.ts');

interface Entry {
  msg?: string;
  pid?: number;
  [field: string]: unknown;
}

const redis = await startRedis();
const dataDir = tempDir('data');
const certsDir = tempDir('certs');
// workers share the listening sockets: with port 0 each would bind a different random port
const ports = { https: await freePort(), http: await freePort(), admin: await freePort() };
const env: Record<string, string> = {
  PORTICO_CONFIG: path.join(ROOT, 'config/portico.yaml'),
  PORTICO_HTTPS_PORT: String(ports.https),
  PORTICO_HTTP_PORT: String(ports.http),
  PORTICO_ADMIN_PORT: String(ports.admin),
  PORTICO_ADMIN_TOKEN: ADMIN_TOKEN,
  PORTICO_REDIS_URL: redis.url,
  PORTICO_DATA_DIR: dataDir,
  PORTICO_CERTS_DIR: certsDir,
  PORTICO_LOG_LEVEL: 'info',
  PORTICO_ACME_DIRECTORY: 'https://127.0.0.1:9/directory',
};

const entries: Entry[] = [];
const raw: string[] = [];
const waiters = new Set<() => void>();
const child: ChildProcess = spawn(process.execPath, [CLI, 'serve', '--workers', '2'], {
  env: { ...process.env, ...env },
  stdio: ['ignore', 'pipe', 'pipe'],
});
const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
const onLine = (line: string) => {
  raw.push(line);
  try {
    entries.push(JSON.parse(line) as Entry);
  } catch {
    // not a log line: kept in raw for messages
  }
  for (const wake of waiters) wake();
};
createInterface({ input: child.stdout! }).on('line', onLine);
createInterface({ input: child.stderr! }).on('line', onLine);

const workerPids = new Set<number>();
t.teardown(async () => {
  if (child.exitCode === null && child.signalCode === null) {
    child.kill('SIGKILL');
    await exited;
  }
  killAll(workerPids);
  await redis.stop();
  cleanup(dataDir, certsDir);
});

/** resolves once `predicate` holds over the log so far; rejects after `ms` with the log */
function waitFor<T>(predicate: () => T | undefined | false, what: string, ms = 20_000): Promise<T> {
  return new Promise((resolve, reject) => {
    const check = () => {
      const value = predicate();
      if (value) {
        waiters.delete(check);
        clearTimeout(timer);
        resolve(value);
      }
    };
    const timer = setTimeout(() => {
      waiters.delete(check);
      reject(new Error(`timed out waiting for ${what}:\n${raw.slice(-40).join('\n')}`));
    }, ms);
    waiters.add(check);
    check();
  });
}

/** what holds sockets on the HTTPS port (for a failure message) */
function sockets(): string {
  try {
    return execFileSync('ss', ['-tnpa', `( sport = :${ports.https} or dport = :${ports.https} )`], { encoding: 'utf8' });
  } catch (err) {
    return `(ss failed: ${(err as Error).message})`;
  }
}

/** a promise that must settle within `ms`: fails with `what` (and the log) otherwise */
function bounded<T>(promise: Promise<T>, what: string, ms = 10_000): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms\n${raw.slice(-10).join('\n')}\n${sockets()}`)), ms);
    }),
  ]);
}
/** GET /v1/categories on a new connection → its status, or the reason it got none */
const get = (what: string, ms = 10_000) =>
  bounded(api(ports.https, ca(), key, { path: '/v1/categories', agent: false }), what, ms).then((a) => a.status, (err: Error) => err.message);
const metricsNow = () => bounded(scrape(ports.admin), 'GET /metrics').then(parseExposition);

const listening = () => entries.filter((e) => typeof e.msg === 'string' && e.msg.startsWith('Portico listening'));

t.test('the primary starts two workers on the same fixed ports', async (t) => {
  const started = await waitFor(() => listening().length >= 2 && listening(), 'two "Portico listening" lines');
  const pids = new Set(started.map((e) => e.pid!));
  t.equal(pids.size, 2, 'two worker pids');
  t.notOk(pids.has(child.pid!), 'the workers are not the primary');
  for (const e of started) {
    t.equal(e.https, ports.https, 'https port shared');
    t.equal(e.admin, ports.admin, 'admin port shared');
  }
  for (const pid of pids) workerPids.add(pid);
  const primary = await waitFor(() => entries.find((e) => typeof e.msg === 'string' && /^primary \d+ runs 2 workers$/.test(e.msg)), 'the primary\'s line');
  t.equal(primary.msg, `primary ${child.pid} runs 2 workers`);
});

const ca = () => readFileSync(path.join(certsDir, 'fallback.crt'), 'utf8');
let key = '';

t.test('requests on new connections are served by both workers, and /metrics sums them', async (t) => {
  ({ key } = await accountWithKey(ports.admin, 'pro'));
  const before = await metricsNow();
  const baseline = sum(before, 'portico_http_requests_total', { route: 'api', method: 'GET', status: '200' });
  const firstLog = entries.length;
  const statuses: Array<number | string> = [];
  for (let i = 0; i < 40; i++) statuses.push(await get(`request ${i}`));
  t.same(statuses.filter((s) => s !== 200), [], 'all 40 answered 200');
  const served = await waitFor(() => {
    const lines = entries.slice(firstLog).filter((e) => e.msg === 'request' && e.route === 'api' && e.path === '/v1/categories');
    return lines.length >= 40 && lines;
  }, '40 access log lines');
  const servingPids = new Set(served.map((e) => e.pid));
  t.ok(servingPids.size >= 2, `requests served by ${servingPids.size} worker pids (${[...servingPids].join(', ')})`);
  for (const pid of servingPids) t.ok(workerPids.has(pid!), `pid ${pid} is a worker`);

  // each worker's counter has only its own share; /metrics (from either worker) shows the sum
  for (let i = 0; i < 4; i++) {
    const e = await metricsNow();
    const total = sum(e, 'portico_http_requests_total', { route: 'api', method: 'GET', status: '200' });
    t.ok(total - baseline >= 40, `scrape ${i + 1}: portico_http_requests_total{route="api",status="200"} grew by ${total - baseline} (≥ 40)`);
    t.equal(e.samples.filter((s) => s.name === 'portico_http_requests_total' && s.labels.route === 'api' && s.labels.method === 'GET' && s.labels.status === '200').length, 1, 'one series, summed (not one per worker)');
    t.equal(sum(e, 'portico_redis_up'), 1, 'portico_redis_up is 1, not 2');
  }
});

t.test('a killed worker is replaced and requests keep succeeding', async (t) => {
  const [victim, survivor] = [...workerPids];
  const before = listening().length;
  process.kill(victim, 'SIGKILL');
  // requests at once, while the primary has yet to notice the death and the replacement starts:
  // the survivor must answer every one (a connection handed to the dead worker would hang)
  const statuses: Array<number | string> = await Promise.all(Array.from({ length: 8 }, (_, i) => get(`request ${i} right after the kill`)));
  for (let i = 0; i < 10; i++) statuses.push(await get(`request ${i} after the kill`));
  const died = await waitFor(() => entries.find((e) => e.msg === 'a worker died; starting a replacement'), 'the primary noticing the death');
  t.equal(died.workerPid, victim, 'the primary names the dead worker');
  const replacement = await waitFor(() => listening().slice(before).find((e) => e.pid !== victim && e.pid !== survivor), 'a replacement "Portico listening"');
  t.ok(replacement.pid, `replacement worker ${replacement.pid}`);
  workerPids.delete(victim);
  workerPids.add(replacement.pid!);
  t.notOk(alive(victim), 'the killed worker is gone');
  t.ok(alive(survivor), 'the other worker kept running');
  const firstLog = entries.length;
  for (let i = 0; i < 20; i++) statuses.push(await get(`request ${i} after the replacement`));
  t.same(statuses.filter((s) => s !== 200), [], `all ${statuses.length} requests around the death answered 200`);
  const served = await waitFor(() => {
    const lines = entries.slice(firstLog).filter((e) => e.msg === 'request' && e.route === 'api');
    return lines.length >= 20 && lines;
  }, '20 access log lines');
  t.ok(served.some((e) => e.pid === replacement.pid), 'the replacement serves requests');
  t.ok(served.some((e) => e.pid === survivor), 'so does the survivor');
  const e = await metricsNow();
  t.ok(sum(e, 'portico_http_requests_total', { route: 'api', method: 'GET', status: '200' }) >= 20, 'metrics still answer (summed over the live workers)');
});

t.test('SIGTERM to the primary stops every worker and exits 0', async (t) => {
  const pids = [...workerPids];
  t.equal(pids.length, 2);
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  const { code, signal } = await exited;
  clearTimeout(timer);
  t.equal(signal, null, 'not killed by a signal');
  t.equal(code, 0, 'exit code 0');
  const deadline = Date.now() + 5_000;
  while (pids.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  for (const pid of pids) t.notOk(alive(pid), `worker ${pid} is gone`);
  t.ok(entries.some((e) => e.msg === 'stopping all workers'), 'the primary said it stops the workers');
  t.ok(entries.filter((e) => e.msg === 'stopped').length >= 2, 'each worker finished its graceful stop');
});
