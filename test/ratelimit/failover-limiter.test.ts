// Redis going away and coming back under traffic: a killed server, a frozen one (SIGSTOP), and
// `closed` mode. Nothing may wait longer than the command timeout, and recovery needs no new limiter.
import t, { type Test } from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import type { BanPolicy, Decision, RateLimiter } from '../../src/ratelimit/limiter.ts';
import { FailoverLimiter, type FailoverOptions } from '../../src/ratelimit/failover-limiter.ts';
import { MemoryLimiter } from '../../src/ratelimit/memory-limiter.ts';
import { RedisLimiter } from '../../src/ratelimit/redis-limiter.ts';
import { startRedis, type RedisServer } from '../helpers/redis.ts';

const TIMEOUT_MS = 150;
// Timers and the event loop on a busy test machine: a request may finish a little after its timer.
const SLACK_MS = 100;
const BAN: BanPolicy = { refusals: 10, windowSeconds: 60, banSeconds: 900 };
const LIMIT = { perMinute: 100_000, perDay: 1_000_000 };

async function setup(t: Test, mode: FailoverOptions['mode']) {
  const server = await startRedis();
  t.teardown(() => server.stop());
  const client = new Redis(server.url, {
    enableAutoPipelining: true,
    enableOfflineQueue: false,
    commandTimeout: TIMEOUT_MS,
    maxRetriesPerRequest: 1,
    retryStrategy: () => 50, // reconnect quickly so the test stays short
  });
  client.on('error', () => {});
  await new Promise((resolve) => client.once('ready', resolve));
  t.teardown(() => client.disconnect());
  const states: boolean[] = [];
  let commandErrors = 0;
  const local = new MemoryLimiter();
  const limiter = new FailoverLimiter(new RedisLimiter(client), local, {
    mode,
    breakerMs: 200,
    onRedisState: (up) => states.push(up),
    onCommandError: () => commandErrors++,
  });
  return { server, client, limiter, local, states, errors: () => commandErrors };
}

// Steady traffic until stopped: every answer, how long it took, and any error.
function traffic(limiter: RateLimiter, subject: string) {
  const results: { ms: number; decision?: Decision; error?: unknown }[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const started = performance.now();
      const batch = Array.from({ length: 5 }, () => limiter.consume(subject, LIMIT, BAN).then(
        (decision) => results.push({ ms: performance.now() - started, decision }),
        (error: unknown) => results.push({ ms: performance.now() - started, error }),
      ));
      await Promise.all(batch);
      await sleep(5);
    }
  })();
  return { results, stop: async () => { running = false; await loop; } };
}

async function until(check: () => boolean, ms: number): Promise<boolean> {
  const deadline = performance.now() + ms;
  while (!check()) {
    if (performance.now() > deadline) return false;
    await sleep(10);
  }
  return true;
}

async function minuteCount(server: RedisServer, subject: string): Promise<number> {
  const probe = new Redis(server.url, { lazyConnect: true });
  await probe.connect();
  const count = await probe.hget(`portico:rl:{${subject}}`, 'minuteUsed');
  probe.disconnect();
  return Number(count);
}

t.test('SIGKILL: local answers within the timeout, then Redis again after restart', async (t) => {
  const { server, limiter, states, errors } = await setup(t, 'local');
  const load = traffic(limiter, 'acct_kill:production');
  await sleep(100);
  t.equal(limiter.redisUp, true);

  await server.kill();
  t.ok(await until(() => !limiter.redisUp, 1000), 'redisUp false after the kill');
  const downAt = load.results.length;
  await sleep(500);
  t.ok(load.results.length > downAt + 20, 'decisions keep coming while Redis is down');

  await server.restart();
  t.ok(await until(() => limiter.redisUp, 3000), 'redisUp true again, same limiter');
  await sleep(100);
  const { results } = load;
  await load.stop();

  t.same(states, [false, true]);
  t.ok(errors() >= 1);
  t.equal(results.filter((r) => r.error).length, 0, 'no request failed');
  t.ok(results.every((r) => r.decision?.allowed), 'every request allowed');
  const slowest = Math.max(...results.map((r) => r.ms));
  t.ok(slowest < TIMEOUT_MS + SLACK_MS, `slowest answer ${slowest.toFixed(0)} ms`);
  t.ok(await minuteCount(server, 'acct_kill:production') > 0, 'counting in the restarted Redis');
});

t.test('SIGSTOP: a frozen Redis costs at most the timeout, SIGCONT recovers', async (t) => {
  const { server, limiter, states } = await setup(t, 'local');
  const pid = server.process.pid!;
  t.teardown(() => { try { process.kill(pid, 'SIGCONT'); } catch { /* already gone */ } });
  const load = traffic(limiter, 'acct_stop:production');
  await sleep(100);

  process.kill(pid, 'SIGSTOP');
  t.ok(await until(() => !limiter.redisUp, 1000), 'redisUp false while frozen');
  await sleep(600); // several breaker periods: each probe waits for the timeout, nothing longer
  const frozen = load.results.length;
  process.kill(pid, 'SIGCONT');
  t.ok(await until(() => limiter.redisUp, 3000), 'redisUp true after SIGCONT');
  await sleep(100);
  const { results } = load;
  await load.stop();

  t.ok(frozen > 30, `${frozen} answers, also while frozen`);
  t.equal(results.filter((r) => r.error).length, 0, 'no request failed');
  const slowest = Math.max(...results.map((r) => r.ms));
  t.ok(slowest < TIMEOUT_MS + SLACK_MS, `slowest answer ${slowest.toFixed(0)} ms`);
  t.same(states, [false, true]);
});

t.test('a call queued behind a pipeline to a frozen Redis still ends within the timeout', async (t) => {
  const { server, client } = await setup(t, 'local');
  const limiter = new RedisLimiter(client);
  const pid = server.process.pid!;
  t.teardown(() => { try { process.kill(pid, 'SIGCONT'); } catch { /* already gone */ } });
  process.kill(pid, 'SIGSTOP');
  const first = limiter.consume('acct_queued:production', LIMIT, BAN).catch((err: unknown) => err);
  // The second call waits behind the first on the same frozen connection.
  await sleep(50);
  const started = performance.now();
  const second = await limiter.consume('acct_queued:production', LIMIT, BAN).catch((err: unknown) => err);
  const ms = performance.now() - started;
  t.match(second, { code: 'REDIS_TIMEOUT' });
  // Without a bound of its own it would wait for the first call's timeout, then its own: ~250 ms.
  t.ok(ms < TIMEOUT_MS + 75, `queued call ended after ${ms.toFixed(0)} ms`);
  await first;
});

t.test("mode 'closed' refuses to decide with code REDIS_DOWN, and recovers", async (t) => {
  const { server, limiter, local } = await setup(t, 'closed');
  t.match(await limiter.consume('acct_closed:production', LIMIT, BAN), { allowed: true });
  await server.kill();
  const started = performance.now();
  await t.rejects(limiter.consume('acct_closed:production', LIMIT, BAN), { code: 'REDIS_DOWN' });
  await t.rejects(limiter.consume('acct_closed:production', LIMIT, BAN), { code: 'REDIS_DOWN' }, 'breaker open');
  t.ok(performance.now() - started < TIMEOUT_MS + SLACK_MS);
  t.equal(limiter.redisUp, false);
  t.equal(local.size, 0, 'nothing decided locally');

  await server.restart();
  let answer: Decision | undefined;
  const deadline = performance.now() + 3000;
  while (!answer && performance.now() < deadline) {
    answer = await limiter.consume('acct_closed:production', LIMIT, BAN).catch(() => undefined);
    if (!answer) await sleep(50);
  }
  t.match(answer, { allowed: true });
  t.equal(limiter.redisUp, true);
});

t.test('breaker: no Redis calls while open, one probe when half-open', async (t) => {
  let calls = 0;
  let failing = true;
  let release: () => void = () => {};
  const primary: RateLimiter = {
    async consume() {
      calls++;
      if (failing) throw new Error('down');
      await new Promise<void>((resolve) => { release = resolve; });
      return { allowed: true, reason: 'ok', limit: 1, remaining: 0, reset: 0, retryAfter: 0 };
    },
    async close() {},
  };
  const local = new MemoryLimiter();
  let commandErrors = 0;
  const limiter = new FailoverLimiter(primary, local, { mode: 'local', breakerMs: 50, onCommandError: () => commandErrors++ });

  await limiter.consume('s', LIMIT, BAN);
  t.equal(calls, 1);
  t.equal(commandErrors, 1);
  for (let i = 0; i < 10; i++) await limiter.consume('s', LIMIT, BAN);
  t.equal(calls, 1, 'open: Redis not called');
  t.equal(local.size, 1, 'answered locally');

  await sleep(60);
  failing = false;
  const probe = limiter.consume('s', LIMIT, BAN);
  await limiter.consume('s', LIMIT, BAN);
  t.equal(calls, 2, 'half-open: one probe, the rest local');
  t.equal(limiter.redisUp, false);
  release();
  await probe;
  t.equal(limiter.redisUp, true);
  const next = limiter.consume('s', LIMIT, BAN);
  t.equal(calls, 3, 'closed: Redis called again');
  release();
  await next;
  await limiter.close();
});

t.test('one breaker per server: a failing server does not stop the calls that go to another', async (t) => {
  // subjects starting with "a" (and the probe subjects of odd length) go to server A, the rest to B
  const nodeOf = (subject: string) => (subject.startsWith('a') || (subject.startsWith('portico:probe') && subject.length % 2 === 1) ? 'A' : 'B');
  const down = new Set(['A']);
  const calls: string[] = [];
  const primary = {
    nodeOf,
    async consume(subject: string) {
      calls.push(subject);
      if (down.has(nodeOf(subject))) throw Object.assign(new Error('down'), { node: nodeOf(subject) });
      return { allowed: true, reason: 'ok', limit: 1, remaining: 0, reset: 0, retryAfter: 0 } as Decision;
    },
    async close() {},
  };
  const states: boolean[] = [];
  const limiter = new FailoverLimiter(primary, new MemoryLimiter(), { mode: 'closed', breakerMs: 50, probeInBackground: true, onRedisState: (up) => states.push(up) });

  await t.rejects(limiter.consume('a1', LIMIT, BAN), { code: 'REDIS_DOWN' });
  t.same(limiter.unreachable, ['A']);
  t.equal(limiter.redisUp, false, 'redisUp: every server reachable');
  calls.length = 0;
  await t.rejects(limiter.consume('a2', LIMIT, BAN), { code: 'REDIS_DOWN' }, 'A is not called while its breaker is open');
  t.match(await limiter.consume('b1', LIMIT, BAN), { allowed: true }, 'B is called');
  t.same(calls, ['b1']);

  down.delete('A');
  t.ok(await until(() => limiter.redisUp, 1000), 'the background probe finds A again');
  t.ok(calls.some((s) => s.startsWith('portico:probe') && nodeOf(s) === 'A'), `probed with a subject of its own (${calls.join(', ')})`);
  t.same(limiter.unreachable, []);
  t.match(await limiter.consume('a3', LIMIT, BAN), { allowed: true });
  t.same(states, [false, true]);
  await limiter.close();
});

t.test('one breaker per server: a server no subject goes to any more has its breaker shut', async (t) => {
  let owner = 'A';
  const calls: string[] = [];
  const primary = {
    nodeOf: () => owner,
    async consume(subject: string) {
      calls.push(subject);
      throw Object.assign(new Error('down'), { node: owner });
    },
    async close() {},
  };
  const limiter = new FailoverLimiter(primary, new MemoryLimiter(), { mode: 'closed', breakerMs: 50, probeInBackground: true });
  await t.rejects(limiter.consume('s', LIMIT, BAN), { code: 'REDIS_DOWN' });
  t.same(limiter.unreachable, ['A']);
  // a failover: every slot now has another owner, which fails too (its breaker opens with its first call)
  owner = 'C';
  t.ok(await until(() => !limiter.unreachable.includes('A'), 1000), 'A\'s breaker is shut without a call');
  t.equal(calls.length, 1, 'A was not probed');
  t.equal(limiter.redisUp, true, 'nothing known unreachable');
  await t.rejects(limiter.consume('s', LIMIT, BAN), { code: 'REDIS_DOWN' });
  t.same(limiter.unreachable, ['C']);
  await limiter.close();
});
