// Regression: after a freeze (SIGSTOP, then SIGCONT) portico_redis_up stayed 0 and "Redis is back"
// was never logged until the next /v1 request, while /readyz already said redis ok: only a request
// probed Redis. The limiter now probes in the background while its breaker is open. A real
// redis-server, a real Portico, and the real limiters.
import t, { type Test } from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { startPortico } from '../helpers/portico.ts';
import { api, admin, accountWithKey } from '../helpers/client.ts';
import { startRedis } from '../helpers/redis.ts';
import { scrape } from '../helpers/prometheus.ts';
import type { BanPolicy } from '../../src/ratelimit/limiter.ts';
import { FailoverLimiter } from '../../src/ratelimit/failover-limiter.ts';
import { MemoryLimiter } from '../../src/ratelimit/memory-limiter.ts';
import { RedisLimiter } from '../../src/ratelimit/redis-limiter.ts';

const BAN: BanPolicy = { refusals: 10, windowSeconds: 60, banSeconds: 900 };
const LIMIT = { perMinute: 100_000, perDay: 1_000_000 };

/** the real RedisLimiter, with the subjects it was asked to count (a request's, or the probe's) */
class WatchedRedisLimiter extends RedisLimiter {
  asked: string[] = [];
  override consume(subject: string, limit: typeof LIMIT, ban: BanPolicy, nowMs?: number) {
    this.asked.push(subject);
    return super.consume(subject, limit, ban, nowMs);
  }
}

const redisUp = async (port: number) => /^portico_redis_up (\d+)/m.exec(await scrape(port))?.[1];

t.test('portico_redis_up and the "Redis is back" line follow Redis after a freeze without /v1 traffic', async (t) => {
  const redis = await startRedis();
  const portico = await startPortico({ PORTICO_REDIS_URL: redis.url, PORTICO_REDIS_COMMAND_TIMEOUT_MS: '300' });
  const pid = redis.process.pid!;
  t.teardown(async () => {
    if (redis.process.exitCode === null && redis.process.signalCode === null) redis.process.kill('SIGCONT');
    await portico.stop();
    await redis.stop();
  });
  const { key } = await accountWithKey(portico.ports.admin, 'enterprise', 'production', LIMIT);
  const get = () => api(portico.ports.https, portico.ca, key, { path: '/v1/categories' });
  t.equal((await get()).status, 200);
  t.equal(await redisUp(portico.ports.admin), '1', 'up before the freeze');

  process.kill(pid, 'SIGSTOP');
  for (let i = 0; i < 3; i++) t.equal((await get()).status, 200, 'answered while frozen');
  t.equal(await redisUp(portico.ports.admin), '0', 'down while frozen');
  process.kill(pid, 'SIGCONT');
  const thawed = performance.now();

  // no /v1 request from here on
  let up: string | undefined;
  while ((up = await redisUp(portico.ports.admin)) !== '1' && performance.now() - thawed < 5000) await sleep(100);
  t.equal(up, '1', `portico_redis_up 1 again ${(performance.now() - thawed).toFixed(0)} ms after SIGCONT, without traffic`);
  t.ok(portico.logs.some((line) => line.includes('Redis is back')), 'logged that Redis is back');
  const ready = await admin(portico.ports.admin, 'GET', '/readyz', undefined, null);
  t.match(ready.json, { redis: 'ok' }, '/readyz agrees');
});

/** a redis-server (resumed and stopped at teardown) and a client with this command timeout */
async function redisAndClient(t: Test, commandTimeout: number): Promise<{ pid: number; client: Redis }> {
  const redis = await startRedis();
  const pid = redis.process.pid!;
  const client = new Redis(redis.url, { enableOfflineQueue: false, commandTimeout, maxRetriesPerRequest: 0 });
  client.on('error', () => {});
  await new Promise((resolve) => client.once('ready', resolve));
  t.teardown(async () => {
    try { process.kill(pid, 'SIGCONT'); } catch { /* gone */ }
    client.disconnect();
    await redis.stop();
  });
  return { pid, client };
}

t.test('the background probe: a frozen Redis is probed every breaker period, and no more after close()', async (t) => {
  const { pid, client } = await redisAndClient(t, 100);
  let errors = 0;
  const states: boolean[] = [];
  const redis = new WatchedRedisLimiter(client);
  const limiter = new FailoverLimiter(redis, new MemoryLimiter(), {
    mode: 'local',
    breakerMs: 100,
    probeInBackground: true,
    onRedisState: (up) => states.push(up),
    onCommandError: () => errors++,
  });
  t.match(await limiter.consume('acct_probe:production', LIMIT, BAN), { allowed: true });

  process.kill(pid, 'SIGSTOP');
  await limiter.consume('acct_probe:production', LIMIT, BAN);
  t.equal(limiter.redisUp, false);
  await sleep(700);
  t.ok(errors >= 2, `${errors} failed calls: the first request's, then the background probes'`);
  // told by what Redis was asked, not by the clock: the probes ask for their own subject
  const asked = redis.asked.length;
  t.match(await limiter.consume('acct_probe:production', LIMIT, BAN), { allowed: true });
  t.notOk(redis.asked.slice(asked).includes('acct_probe:production'), 'a request never waits for Redis (or the probe): it is not sent there');

  process.kill(pid, 'SIGCONT');
  const thawed = performance.now();
  while (!limiter.redisUp && performance.now() - thawed < 3000) await sleep(20);
  t.equal(limiter.redisUp, true, `up again after ${(performance.now() - thawed).toFixed(0)} ms, with no request`);
  t.same(states, [false, true]);

  // open again, then closed: the timer stops with the limiter
  process.kill(pid, 'SIGSTOP');
  await limiter.consume('acct_probe:production', LIMIT, BAN);
  await limiter.close();
  const after = errors;
  await sleep(500);
  t.equal(errors, after, 'no probe after close()');
});

t.test('redisStalled: a call right after another user of Redis timed out is answered without Redis', async (t) => {
  const { pid, client } = await redisAndClient(t, 300);
  let stalled = false;
  let errors = 0;
  const redis = new WatchedRedisLimiter(client);
  const limiter = new FailoverLimiter(redis, new MemoryLimiter(), { mode: 'closed', redisStalled: () => stalled, onCommandError: () => errors++ });
  t.teardown(() => limiter.close());
  t.match(await limiter.consume('acct_stalled:production', LIMIT, BAN), { allowed: true });

  process.kill(pid, 'SIGSTOP');
  stalled = true;
  await t.rejects(limiter.consume('acct_stalled:production', LIMIT, BAN), { code: 'REDIS_DOWN' }, 'closed: refused');
  t.same(redis.asked, ['acct_stalled:production'], 'at once: not sent to the frozen Redis to wait out the 300 ms timeout');
  t.equal(errors, 0, 'no call failed: none was made');
  t.equal(limiter.redisUp, true, 'the breaker is left to its own calls');
});
