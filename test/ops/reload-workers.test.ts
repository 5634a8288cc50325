// POST /admin/reload with `portico serve --workers 2` (Redis): the worker that takes the request has
// every worker reload, and answers 200 only once all of them apply the new file; a file refused is
// refused by all, and none applies it.
import t from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseDocument } from 'yaml';
import { tempDir, cleanup, ADMIN_TOKEN, killAll } from '../helpers/portico.ts';
import { admin, api, accountWithKey } from '../helpers/client.ts';
import { freePort } from '../helpers/free-port.ts';
import { startRedis } from '../helpers/redis.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const CLI = path.join(ROOT, 'src/cli/main.ts');
const ORIGINAL = readFileSync(path.join(ROOT, 'config/portico.yaml'), 'utf8');

interface Entry {
  msg?: string;
  pid?: number;
  [field: string]: unknown;
}

const redis = await startRedis();
const dataDir = tempDir('data');
const certsDir = tempDir('certs');
const dir = tempDir('reload-workers');
const configFile = path.join(dir, 'portico.yaml');
/** config/portico.yaml with `changes` */
function writeConfig(changes: Array<[path: string[], value: unknown]> = []): void {
  const doc = parseDocument(ORIGINAL);
  for (const [at, value] of changes) doc.setIn(at, value);
  writeFileSync(configFile, String(doc));
}
writeConfig();

// workers share the listening sockets: fixed ports
const ports = { https: await freePort(), http: await freePort(), admin: await freePort() };
const entries: Entry[] = [];
const raw: string[] = [];
const child: ChildProcess = spawn(process.execPath, [CLI, 'serve', '--workers', '2'], {
  env: {
    ...process.env,
    PORTICO_CONFIG: configFile,
    PORTICO_HTTPS_PORT: String(ports.https),
    PORTICO_HTTP_PORT: String(ports.http),
    PORTICO_ADMIN_PORT: String(ports.admin),
    PORTICO_ADMIN_TOKEN: ADMIN_TOKEN,
    PORTICO_REDIS_URL: redis.url,
    PORTICO_REDIS_COMMAND_TIMEOUT_MS: '1000',
    PORTICO_DATA_DIR: dataDir,
    PORTICO_CERTS_DIR: certsDir,
    PORTICO_LOG_LEVEL: 'info',
    PORTICO_ACME_DIRECTORY: 'https://127.0.0.1:9/directory',
  },
  stdio: ['ignore', 'pipe', 'pipe'],
});
const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
const onLine = (line: string) => {
  raw.push(line);
  try {
    entries.push(JSON.parse(line) as Entry);
  } catch {
    // not a log line: kept in raw for messages
  }
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
  cleanup(dataDir, certsDir, dir);
});

async function waitFor<T>(predicate: () => T | undefined | false, what: string, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = predicate();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}:\n${raw.slice(-30).join('\n')}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
const listening = await waitFor(() => {
  const lines = entries.filter((e) => typeof e.msg === 'string' && e.msg.startsWith('Portico listening'));
  return lines.length >= 2 && lines;
}, 'two workers listening');
for (const e of listening) workerPids.add(e.pid!);
const ca = readFileSync(path.join(certsDir, 'fallback.crt'), 'utf8');
const { key } = await accountWithKey(ports.admin, 'pro');

/**
 * /v1 calls on new connections until both workers have served some (by the access lines' pid):
 * the X-RateLimit-Limit of every answer
 */
async function limitsOnBothWorkers(): Promise<{ limits: Set<string>; pids: Set<number> }> {
  const firstLine = entries.length;
  const limits = new Set<string>();
  const pids = new Set<number>();
  for (let i = 0; i < 200 && pids.size < 2; i++) {
    const answer = await api(ports.https, ca, key, { path: '/v1/categories', agent: false });
    limits.add(`${answer.status} ${answer.headers['x-ratelimit-limit']}`);
    if (i % 10 === 9 || i >= 20) {
      // access lines reach stdout within 250 ms
      await new Promise((r) => setTimeout(r, 300));
      for (const e of entries.slice(firstLine)) if (e.msg === 'request' && e.path === '/v1/categories') pids.add(e.pid!);
    }
  }
  return { limits, pids };
}

t.test('POST /admin/reload reloads every worker before it answers 200', async (t) => {
  const before = await limitsOnBothWorkers();
  t.same([...before.limits], ['200 300'], 'the Pro plan\'s 300 per minute on both workers');
  writeConfig([[['ratelimit', 'plans', 'pro'], { perMinute: 250, perDay: 10000 }]]);
  const reloaded = await admin(ports.admin, 'POST', '/admin/reload');
  t.equal(reloaded.status, 200, reloaded.text);
  t.same(reloaded.json, { status: 'reloaded' });
  const after = await limitsOnBothWorkers();
  t.equal(after.pids.size, 2, `served by both workers (${[...after.pids].join(', ')})`);
  t.same([...after.limits], ['200 250'], 'every answer, from either worker, has the new 250');
  const logged = await waitFor(() => {
    const pids = new Set(entries.filter((e) => e.msg === 'configuration reloaded').map((e) => e.pid));
    return pids.size >= 2 && pids;
  }, 'both workers logging "configuration reloaded"', 5_000);
  t.same([...logged].sort(), [...workerPids].sort(), 'each worker logged its reload');
});

t.test('a file refused is refused by all workers; none applies any of it', async (t) => {
  writeConfig([[['ratelimit', 'plans', 'pro'], { perMinute: 200, perDay: 10000 }], [['bogus'], true]]);
  const refused = await admin(ports.admin, 'POST', '/admin/reload');
  t.equal(refused.status, 400, refused.text);
  t.match(refused.json?.message, /The configuration was not reloaded: .*bogus/);
  t.notMatch(refused.json?.message, /applied/, 'no worker applied it');
  const after = await limitsOnBothWorkers();
  t.equal(after.pids.size, 2, 'served by both workers');
  t.same([...after.limits], ['200 250'], 'both keep the previous 250');
});
