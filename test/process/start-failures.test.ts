// `portico serve --workers 2` whose workers cannot start: the cause is said once (one fatal log line,
// one stderr line), the primary exits 1, and no worker is said to have stopped badly. Each worker
// used to print its own fatal lines, and one whose start failed after the primary began stopping
// was logged as `a worker did not stop cleanly`. A taken HTTP port (the HTTPS listener binds first)
// counted the worker as started, so the primary replaced it at once, forever.
import t, { type Test } from 'tap';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import net from 'node:net';
import path from 'node:path';
import { baseEnv, tempDir, cleanup, killAll } from '../helpers/portico.ts';
import { freePort } from '../helpers/free-port.ts';
import { startRedis } from '../helpers/redis.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');

interface Outcome {
  code: number | null | 'running';
  stdout: string[];
  stderr: string[];
  log: Array<{ msg?: string; level?: number; err?: { message?: string } }>;
}

const redis = await startRedis();
const dirs: string[] = [];
const pids = new Set<number>();
t.teardown(async () => {
  killAll(pids);
  await redis.stop();
  cleanup(...dirs);
});

/** a port something else listens on (all addresses) until the test ends */
async function takenPort(t: Test): Promise<number> {
  const taken = net.createServer();
  await new Promise<void>((resolve) => taken.listen(0, resolve));
  t.teardown(() => new Promise<void>((resolve) => taken.close(() => resolve())));
  return (taken.address() as net.AddressInfo).port;
}

async function serveWorkers(env: Record<string, string>): Promise<Outcome> {
  const dataDir = tempDir('data');
  const certsDir = tempDir('certs');
  dirs.push(dataDir, certsDir);
  const full = baseEnv({ PORTICO_ADMIN_PORT: String(await freePort()), PORTICO_REDIS_URL: redis.url, PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir, ...env });
  const child = spawn(process.execPath, [path.join(ROOT, 'src/cli/main.ts'), 'serve', '--workers', '2'], { env: { ...process.env, ...full }, stdio: ['ignore', 'pipe', 'pipe'] });
  pids.add(child.pid!);
  const stdout: string[] = [];
  const stderr: string[] = [];
  createInterface({ input: child.stdout! }).on('line', (line) => stdout.push(line));
  createInterface({ input: child.stderr! }).on('line', (line) => stderr.push(line));
  const closed = new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));
  // bounded generously: a start that fails takes about a second
  const code = await Promise.race([closed, new Promise<'running'>((resolve) => setTimeout(() => resolve('running'), 30_000))]);
  if (code === 'running') child.kill('SIGKILL');
  const log = stdout.flatMap((line) => {
    try {
      return [JSON.parse(line)];
    } catch {
      return [];
    }
  });
  return { code, stdout, stderr, log };
}

function saidOnce(t: Test, outcome: Outcome, cause: RegExp): void {
  const shown = [...outcome.stderr, ...outcome.stdout.filter((l) => !l.startsWith('{'))].join('\n');
  t.equal(outcome.code, 1, `exit 1 (stderr: ${shown})`);
  const fatal = outcome.log.filter((e) => e.level === 60);
  t.equal(fatal.length, 1, `one fatal log line (${fatal.map((e) => e.msg).join(' | ')})`);
  t.match(fatal[0]?.err?.message, cause, 'it names the cause');
  t.equal(fatal[0]?.msg, 'Portico could not start', 'as a single process says it');
  t.equal(outcome.stderr.length, 1, `one stderr line: ${JSON.stringify(outcome.stderr)}`);
  t.match(outcome.stderr[0], new RegExp(`^portico: .*${cause.source}`), 'stderr names the cause');
  t.notMatch(outcome.stderr[0], /null:/, 'in words, not cluster mode\'s "bind EADDRINUSE null:8443"');
  t.notOk(outcome.log.some((e) => e.msg === 'a worker did not stop cleanly'), 'no worker is said to have stopped badly');
  t.notOk(outcome.log.some((e) => /replacement|trying again/.test(e.msg ?? '')), 'no replacement was forked');
}

t.test('issue: the HTTPS port taken: the cause once, not once per worker, and no "did not stop cleanly"', async (t) => {
  const https = await takenPort(t);
  // the duplicates depended on how the two workers' failures interleaved: three runs side by side
  const outcomes = await Promise.all([0, 1, 2].map(async () => serveWorkers({ PORTICO_HTTPS_PORT: String(https), PORTICO_HTTP_PORT: String(await freePort()) })));
  for (const [i, outcome] of outcomes.entries()) t.test(`run ${i + 1}`, async (t) => saidOnce(t, outcome, /the https listener cannot bind port \d+.*EADDRINUSE/));
});

t.test('issue: the HTTP port taken: the start stops with exit 1 instead of replacing workers forever', async (t) => {
  const http = await takenPort(t);
  const outcome = await serveWorkers({ PORTICO_HTTPS_PORT: String(await freePort()), PORTICO_HTTP_PORT: String(http) });
  saidOnce(t, outcome, /the http listener cannot bind port \d+.*EADDRINUSE/);
});

t.test('Redis refusing connections: the fatal line gives the reason once', async (t) => {
  // the error and the one it wrapped carried the same words, and the log line joined both:
  // "connect ECONNREFUSED 127.0.0.1:P; the start stops: connect ECONNREFUSED 127.0.0.1:P"
  const outcome = await serveWorkers({ PORTICO_REDIS_URL: `redis://127.0.0.1:${await freePort()}`, PORTICO_HTTPS_PORT: String(await freePort()), PORTICO_HTTP_PORT: String(await freePort()) });
  saidOnce(t, outcome, /ECONNREFUSED/);
  const message: string = outcome.log.find((e) => e.level === 60)?.err?.message ?? '';
  t.equal(message.split('ECONNREFUSED').length - 1, 1, `the reason once (${message})`);
});
