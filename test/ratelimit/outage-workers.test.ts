// Regression: while Redis was unreachable (`ratelimit.onRedisDown: local`), `portico serve --workers 2`
// enforced the limits per worker process, not per instance: each worker fell back to its own
// MemoryLimiter, so a free key (60/min) had 120 of 150 parallel calls answered 200 during a freeze.
// DESIGN §4 and README "Redis outages": limits are enforced per instance. A real redis-server, a real
// `portico serve --workers 2`, real HTTPS on new connections (the kernel spreads them over the workers).
// Regression too: the instance's limiter started each key from 0 rather than from what Redis had counted,
// so a free key that had used 40 of its minute got 60 more during a freeze; now the workers' calls
// carry Redis's last decision to the primary, which counts on from it.
import t from 'tap';
import https from 'node:https';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { spawnPortico, tempDir, cleanup, killAll, type Child } from '../helpers/portico.ts';
import { api, accountWithKey, type Answer } from '../helpers/client.ts';
import { freePort } from '../helpers/free-port.ts';
import { startRedis } from '../helpers/redis.ts';

// baseEnv's command timeout (1000 ms): the longest a limiter call waits for Redis, and for the primary
const TIMEOUT_MS = 1000;

interface Line {
  msg?: string;
  pid?: number;
  accountId?: string;
  status?: number;
  path?: string;
}

const redis = await startRedis();
const dataDir = tempDir('data');
const certsDir = tempDir('certs');
// workers share the listening sockets: with port 0 each would bind a different random port
const env = {
  PORTICO_REDIS_URL: redis.url,
  PORTICO_HTTPS_PORT: String(await freePort()),
  PORTICO_HTTP_PORT: String(await freePort()),
  PORTICO_ADMIN_PORT: String(await freePort()),
  PORTICO_DATA_DIR: dataDir,
  PORTICO_CERTS_DIR: certsDir,
};
const portico: Child = await spawnPortico(env, ['--workers', '2']);
const primaryPid = portico.process.pid!;
const workerPids = new Set<number>();

const resume = (pid: number) => {
  try {
    process.kill(pid, 'SIGCONT');
  } catch {
    // gone already
  }
};
t.teardown(async () => {
  resume(redis.process.pid!);
  resume(primaryPid);
  const stopped = portico.kill('SIGTERM');
  const timer = setTimeout(() => portico.process.kill('SIGKILL'), 15_000);
  await stopped;
  clearTimeout(timer);
  killAll(workerPids);
  await redis.stop();
  cleanup(dataDir, certsDir);
});

/** the JSON log lines, from the `from`-th line of the output on */
const lines = (from = 0): Line[] =>
  portico.logs.slice(from).flatMap((text) => {
    try {
      return [JSON.parse(text) as Line];
    } catch {
      return [];
    }
  });
const listening = () => lines().filter((l) => l.msg?.startsWith('Portico listening'));
/** the pids that answered this account's calls (access lines), from the `from`-th log line on */
const answeredBy = (accountId: string, from = 0) => new Set(lines(from).filter((l) => l.msg === 'request' && l.accountId === accountId).map((l) => l.pid!));

async function until<T>(what: string, check: () => T | undefined | false, ms = 20_000): Promise<T> {
  const deadline = performance.now() + ms;
  for (;;) {
    const value = check();
    if (value) return value;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}:\n${portico.logs.slice(-20).join('\n')}`);
    await sleep(50);
  }
}

/** resumes Redis and waits until each of `pids` says so: their limiters count in Redis again, not in the primary */
async function thaw(pids: number[]): Promise<void> {
  const from = portico.logs.length;
  process.kill(redis.process.pid!, 'SIGCONT');
  await until(`"Redis is back" from ${pids.join(', ')}`, () => {
    const back = new Set(lines(from).filter((l) => l.msg?.startsWith('Redis is back')).map((l) => l.pid!));
    return pids.every((pid) => back.has(pid));
  });
}

const call = (key: string) => api(Number(env.PORTICO_HTTPS_PORT), portico.ca, key, { path: '/v1/categories' });

/** a free key's minute is the window its answers report while it has fewer than 60 left of its day */
function minuteUsed(answer: Answer): number {
  if (answer.headers['x-ratelimit-limit'] !== '60') throw new Error(`not a free key's minute: ${JSON.stringify(answer.headers)}`);
  return 60 - Number(answer.headers['x-ratelimit-remaining']);
}

let probes = 0;
/**
 * One keep-alive connection to each worker. The kernel picks the worker of a new connection and may
 * give one worker many in a row on a busy machine, so new connections are opened (each named by the
 * access line of a call without a key, counted against this IP, not the key) until both have one.
 */
async function connectionPerWorker(): Promise<https.Agent[]> {
  const found = new Map<number, https.Agent>();
  while (found.size < 2) {
    if (probes >= 40) throw new Error(`the kernel gave ${probes} new connections to one worker`);
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    const path = `/v1/which-worker-${probes++}`;
    await api(Number(env.PORTICO_HTTPS_PORT), portico.ca, null, { path, agent });
    const pid = await until(`the access line of ${path}`, () => lines().find((l) => l.msg === 'request' && l.path === path)?.pid);
    if (found.has(pid)) agent.destroy();
    else found.set(pid, agent);
  }
  return [...found.values()];
}

/**
 * calls through Redis until at least `target` of the key's minute are used, the last two on different
 * workers: each worker's last decision from Redis is then the minute's count, or one less. Returns the count.
 */
async function useUp(key: string, target: number): Promise<number> {
  const agents = await connectionPerWorker();
  let used = 0;
  // ends after a call on the second worker's connection, the one before it on the first's
  for (let i = 0; used < target || i % 2 === 1; i++) {
    const answer = await api(Number(env.PORTICO_HTTPS_PORT), portico.ca, key, { path: '/v1/categories', agent: agents[i % 2] });
    if (answer.status !== 200) throw new Error(`using up the minute: ${answer.status} ${answer.text}`);
    used = minuteUsed(answer);
  }
  for (const agent of agents) agent.destroy();
  return used;
}

/** Redis saves its data now and, after restartRedis(), starts from it: what it counted after the save is gone */
async function saveRedis(): Promise<void> {
  const client = new Redis(redis.url, { maxRetriesPerRequest: 1 });
  try {
    await client.save();
  } finally {
    client.disconnect();
  }
}

/** kills Redis (frozen or not) and starts it again from its last save; waits until each of `pids` says it is back */
async function restartRedis(pids: number[]): Promise<void> {
  const from = portico.logs.length;
  await redis.kill();
  await redis.restart();
  await until(`"Redis is back" from ${pids.join(', ')}`, () => {
    const back = new Set(lines(from).filter((l) => l.msg?.startsWith('Redis is back')).map((l) => l.pid!));
    return pids.every((pid) => back.has(pid));
  });
}

/**
 * calls on new connections until each of `pids` has answered this account with 200 (Redis up: its key
 * is then known to that worker); 429s from a breaker still open after a freeze are waited out
 */
async function warm(key: string, accountId: string, pids: number[]): Promise<Answer> {
  const answers: string[] = [];
  // answers from now on: after Redis restarts, a worker reads a cached key again before it answers from it
  const from = portico.logs.length;
  for (let i = 0; i < 60; i++) {
    const answer = await call(key);
    answers.push(String(answer.status));
    await sleep(300); // the access lines are written at least every 250 ms
    const served = new Set(lines(from).filter((l) => l.msg === 'request' && l.accountId === accountId && l.status === 200).map((l) => l.pid!));
    if (pids.every((pid) => served.has(pid))) return answer;
  }
  throw new Error(`workers ${pids.join(', ')} did not all answer 200 to 60 calls on new connections: ${answers.join(' ')}`);
}

/** `n` parallel calls on new connections: how many of each status (and 429 code) */
async function burst(key: string, n: number): Promise<{ tally: Record<string, number>; answers: Answer[] }> {
  const answers = await Promise.all(Array.from({ length: n }, () => call(key)));
  const tally: Record<string, number> = {};
  for (const a of answers) {
    const name = a.status === 429 ? `429 ${a.json?.code}` : String(a.status);
    tally[name] = (tally[name] ?? 0) + 1;
  }
  return { tally, answers };
}

const admitted = (tally: Record<string, number>) => tally['200'] ?? 0;
const refused = (tally: Record<string, number>) => (tally['429 rate_limited'] ?? 0) + (tally['429 key_banned'] ?? 0);

await until('two workers listening', () => listening().length >= 2);
for (const l of listening()) workerPids.add(l.pid!);
const first = [...workerPids];

const free = await accountWithKey(Number(env.PORTICO_ADMIN_PORT), 'free');

t.test("during a freeze a free key gets the rest of its minute from the instance: not 60 more, and not from each worker", async (t) => {
  t.equal(first.length, 2, 'two worker processes');
  t.notOk(workerPids.has(primaryPid), 'the workers are not the primary');
  await warm(free.key, free.accountId, first);
  // the calls through Redis and the 150 must fall into one minute window (they take a few seconds)
  await until('a minute with room for the calls', () => new Date().getSeconds() < 40, 25_000);
  const used = await useUp(free.key, 40);
  const logged = portico.logs.length;
  process.kill(redis.process.pid!, 'SIGSTOP');
  const { tally } = await burst(free.key, 150);
  // the primary counts on from the first worker's calls to reach it: that worker knew `used` or `used - 1`
  t.ok(admitted(tally) >= 60 - used && admitted(tally) <= 61 - used, `${60 - used} (or one more) × 200 over both workers, ${used} of 60 used through Redis: ${JSON.stringify(tally)}`);
  t.equal(refused(tally), 150 - admitted(tally), 'the others refused with 429');
  await sleep(300);
  t.same([...answeredBy(free.accountId, logged)].sort(), [...first].sort(), 'both workers answered some of the calls');
});

t.test('a worker that replaces a dead one finds the instance\'s counts', async (t) => {
  await thaw(first);
  // the calls sent into the frozen Redis above were applied when it resumed: a new key for this test
  const other = await accountWithKey(Number(env.PORTICO_ADMIN_PORT), 'free');
  await warm(other.key, other.accountId, first);
  await until('a minute with room for the calls', () => new Date().getSeconds() < 35, 30_000);
  await saveRedis();
  process.kill(redis.process.pid!, 'SIGSTOP');
  const before = await burst(other.key, 30);
  t.same(before.tally, { 200: 30 }, `30 calls during a freeze: ${JSON.stringify(before.tally)}`);
  // the primary's count: it went on from what the workers last heard from Redis
  const counted = Math.max(...before.answers.map(minuteUsed));
  const [dead, survivor] = first;
  // Redis comes back from its save, without the 30 calls it was sent while frozen: only the primary
  // has them, so what the workers hear from Redis next is less than what the primary counted
  await restartRedis([survivor]);
  process.kill(dead, 'SIGKILL');
  const replacement = await until('a replacement worker', () => listening().find((l) => !workerPids.has(l.pid!))?.pid);
  workerPids.add(replacement);
  const inRedis = minuteUsed(await warm(other.key, other.accountId, [replacement, survivor]));
  t.ok(inRedis < counted, `Redis has ${inRedis} of the minute, the primary ${counted}`);
  const logged = portico.logs.length;
  process.kill(redis.process.pid!, 'SIGSTOP');
  const after = await burst(other.key, 60);
  t.equal(admitted(after.tally), 60 - counted, `the minute's other ${60 - counted} calls, over the survivor and the replacement: ${JSON.stringify(after.tally)}`);
  t.equal(refused(after.tally), counted, 'the rest refused with 429');
  await sleep(300);
  t.ok(answeredBy(other.accountId, logged).has(replacement), 'the replacement answered some of them');
});

t.test('a primary that does not answer: each worker decides by itself after one timeout, and no call hangs', async (t) => {
  await thaw([...workerPids].filter((pid) => pid !== first[0]));
  const pro = await accountWithKey(Number(env.PORTICO_ADMIN_PORT), 'pro');
  await warm(pro.key, pro.accountId, [...workerPids].filter((pid) => pid !== first[0]));
  process.kill(redis.process.pid!, 'SIGSTOP');
  process.kill(primaryPid, 'SIGSTOP');
  const started = performance.now();
  const { tally } = await burst(pro.key, 20);
  const ms = performance.now() - started;
  process.kill(primaryPid, 'SIGCONT');
  t.same(tally, { 200: 20 }, `answered by the workers' own limiters: ${JSON.stringify(tally)}`);
  // one wait for Redis, one for the primary, and what a loaded 2-core machine adds
  t.ok(ms < 2 * TIMEOUT_MS + 1_500, `${ms.toFixed(0)} ms for 20 calls (command timeout ${TIMEOUT_MS} ms)`);
});
