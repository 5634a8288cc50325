// Regression: a Redis that was slow for a moment under a burst let up to a whole extra limit through.
// One timed-out limiter call opens the breaker, and for its second every call was decided by the local
// limiter, which started each subject from 0 while Redis held its counts (an enterprise key with 1000 a
// minute, 3000 calls at once: 1208–1658 answered 200). README "Redis outages": the local limiter
// continues from Redis's last decision for the subject. A real redis-server frozen with SIGSTOP; the
// limiters of main.ts (RedisLimiter, MemoryLimiter, FailoverLimiter with its background probe) in this
// process, on an injected clock so that every call falls into one minute.
import t, { type Test } from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import type { BanPolicy, Decision, Limit } from '../../src/ratelimit/limiter.ts';
import { FailoverLimiter } from '../../src/ratelimit/failover-limiter.ts';
import { MemoryLimiter } from '../../src/ratelimit/memory-limiter.ts';
import { RedisLimiter } from '../../src/ratelimit/redis-limiter.ts';
import { startRedis } from '../helpers/redis.ts';

const TIMEOUT_MS = 150;
// the middle of a minute: the test's calls all fall into it
const NOW = Date.parse('2025-03-10T12:00:20Z');
// no bans unless a test wants one: the refusals of a burst must not turn into one
const NO_BAN: BanPolicy = { refusals: 1000, windowSeconds: 60, banSeconds: 60 };

async function setUp(t: Test) {
  const server = await startRedis();
  const pid = server.process.pid!;
  t.teardown(async () => {
    try {
      process.kill(pid, 'SIGCONT');
    } catch {
      // gone already
    }
    await server.stop();
  });
  const client = new Redis(server.url, { enableAutoPipelining: true, enableOfflineQueue: false, commandTimeout: TIMEOUT_MS, maxRetriesPerRequest: 1 });
  client.on('error', () => {});
  await new Promise((resolve) => client.once('ready', resolve));
  const limiter = new FailoverLimiter(new RedisLimiter(client), new MemoryLimiter(), { mode: 'local', probeInBackground: true });
  t.teardown(async () => {
    await limiter.close();
    client.disconnect();
  });
  const consume = (subject: string, limit: Limit, ban = NO_BAN) => limiter.consume(subject, limit, ban, NOW);
  /** `n` calls one after the other */
  const calls = async (n: number, subject: string, limit: Limit, ban = NO_BAN) => {
    const decisions: Decision[] = [];
    for (let i = 0; i < n; i++) decisions.push(await consume(subject, limit, ban));
    return decisions;
  };
  return {
    limiter,
    consume,
    calls,
    freeze: () => process.kill(pid, 'SIGSTOP'),
    thaw: () => process.kill(pid, 'SIGCONT'),
  };
}

const allowed = (decisions: Decision[]) => decisions.filter((d) => d.allowed).length;

async function until(check: () => boolean, ms: number): Promise<boolean> {
  const deadline = performance.now() + ms;
  while (!check()) {
    if (performance.now() > deadline) return false;
    await sleep(10);
  }
  return true;
}

t.test('15 of 20 used through Redis, then Redis freezes: 5 more this minute, not 20', async (t) => {
  const s = await setUp(t);
  const limit = { perMinute: 20, perDay: 1000 };
  t.equal(allowed(await s.calls(15, 'acct_minute:production', limit)), 15, 'through Redis');
  s.freeze();
  const during = await s.calls(25, 'acct_minute:production', limit);
  t.equal(s.limiter.redisUp, false, 'decided without Redis');
  t.equal(allowed(during), 5, `5 allowed while Redis is frozen: ${allowed(during)}`);
  t.match(during[0], { allowed: true, limit: 20, remaining: 4 }, 'the first one counts on from Redis\'s 15');
  t.match(during.at(-1), { allowed: false, reason: 'rate_limited', remaining: 0 });
});

t.test('a burst on its way to Redis when it stalls for a moment: the minute still ends at the limit', async (t) => {
  const s = await setUp(t);
  const limit = { perMinute: 20, perDay: 1000 };
  const before = await s.calls(15, 'acct_burst:production', limit);
  s.freeze();
  // every one of these is sent to Redis and times out: the local limiter decides them all
  const burst = await Promise.all(Array.from({ length: 20 }, () => s.consume('acct_burst:production', limit)));
  t.equal(s.limiter.redisUp, false, 'decided without Redis');
  s.thaw();
  t.ok(await until(() => s.limiter.redisUp, 5000), 'Redis is back');
  // Redis ran the 20 scripts when it woke: it counted 5 of them and refused the rest
  const after = await s.calls(10, 'acct_burst:production', limit);
  t.equal(s.limiter.redisUp, true, 'decided by Redis again');
  t.equal(allowed(burst), 5, `5 of the burst allowed: ${allowed(burst)}`);
  t.equal(allowed(after), 0, 'none after it: Redis counted the burst');
  t.equal(allowed(before) + allowed(burst) + allowed(after), 20, 'the minute let 20 through in all');
});

t.test('the day as the window with fewest left: 5 more today, not 20', async (t) => {
  const s = await setUp(t);
  const limit = { perMinute: 1000, perDay: 20 };
  const before = await s.calls(15, 'acct_day:production', limit);
  t.match(before.at(-1), { limit: 20, remaining: 5 }, 'Redis reports the day');
  s.freeze();
  const during = await s.calls(25, 'acct_day:production', limit);
  t.equal(s.limiter.redisUp, false, 'decided without Redis');
  t.equal(allowed(during), 5, `5 allowed while Redis is frozen: ${allowed(during)}`);
});

t.test('a subject Redis banned stays banned while Redis is frozen', async (t) => {
  const s = await setUp(t);
  const limit = { perMinute: 2, perDay: 1000 };
  const ban: BanPolicy = { refusals: 1, windowSeconds: 60, banSeconds: 600 };
  const before = await s.calls(4, 'ip:203.0.113.7:production', limit, ban);
  t.match(before.map((d) => d.reason), ['ok', 'ok', 'rate_limited', 'key_banned'], 'banned by Redis');
  s.freeze();
  // another subject's call finds Redis frozen and opens the breaker (this process answers the banned
  // one from its own copy of the ban while it still asks Redis)
  await s.consume('acct_other:production', limit);
  t.equal(s.limiter.redisUp, false, 'Redis is not asked');
  const during = await s.calls(3, 'ip:203.0.113.7:production', limit, ban);
  t.same(during.map((d) => d.reason), ['key_banned', 'key_banned', 'key_banned'], 'still banned');
  t.ok(during.every((d) => d.retryAfter > 500), `Retry-After: the ban's rest (${during[0].retryAfter} s)`);
});
