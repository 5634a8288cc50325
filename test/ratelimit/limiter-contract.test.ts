// One contract, two backends (STYLE §4): every case runs against MemoryLimiter and RedisLimiter.
// Time is injected (nowMs) so window edges are tested without sleeping.
import t, { type Test } from 'tap';
import { Redis } from 'ioredis';
import type { BanPolicy, Limit, RateLimiter } from '../../src/ratelimit/limiter.ts';
import { MemoryLimiter } from '../../src/ratelimit/memory-limiter.ts';
import { RedisLimiter } from '../../src/ratelimit/redis-limiter.ts';
import { startRedis } from '../helpers/redis.ts';

const BAN: BanPolicy = { refusals: 10, windowSeconds: 60, banSeconds: 900 };
const at = (iso: string) => Date.parse(iso);
const sec = (iso: string) => Date.parse(iso) / 1000;

const server = await startRedis();
t.teardown(() => server.stop());

function newClient(): Redis {
  const client = new Redis(server.url, {
    enableAutoPipelining: true,
    enableOfflineQueue: false,
    commandTimeout: 1000, // generous: 60 parallel calls on a busy test machine
    maxRetriesPerRequest: 1,
  });
  client.on('error', () => {});
  return client;
}

interface Backend {
  name: string;
  /** `count` limiters that share one store, as instances behind a load balancer would */
  make(t: Test, count?: number): Promise<RateLimiter[]>;
}

const backends: Backend[] = [
  {
    name: 'memory',
    async make(t, count = 1) {
      const limiter = new MemoryLimiter();
      t.teardown(() => limiter.close());
      return Array.from({ length: count }, () => limiter);
    },
  },
  {
    name: 'redis',
    async make(t, count = 1) {
      const limiters: RateLimiter[] = [];
      for (let i = 0; i < count; i++) {
        const client = newClient();
        await new Promise((resolve) => client.once('ready', resolve));
        const limiter = new RedisLimiter(client);
        t.teardown(async () => { await limiter.close(); client.disconnect(); });
        limiters.push(limiter);
      }
      return limiters;
    },
  },
];

let subjects = 0;
const subject = () => `acct_${++subjects}:production`;

async function times(n: number, limiter: RateLimiter, s: string, limit: Limit, nowMs: number) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(await limiter.consume(s, limit, BAN, nowMs));
  return out;
}

for (const backend of backends) {
  t.test(backend.name, async (t) => {
    t.test('headers: limit, remaining, reset of the minute window, then a refusal', async (t) => {
      const [limiter] = await backend.make(t);
      const s = subject();
      const limit = { perMinute: 5, perDay: 100 };
      const now = at('2025-03-10T12:00:30.500Z');
      const first = await limiter.consume(s, limit, BAN, now);
      t.same(first, { allowed: true, reason: 'ok', limit: 5, remaining: 4, reset: sec('2025-03-10T12:01:00Z'), retryAfter: 0 });
      const rest = await times(4, limiter, s, limit, now);
      t.same(rest.map((d) => d.remaining), [3, 2, 1, 0]);
      const refused = await limiter.consume(s, limit, BAN, now);
      // 29.5 s left in the minute: Retry-After rounds up so a client never comes back too early.
      t.same(refused, { allowed: false, reason: 'rate_limited', limit: 5, remaining: 0, reset: sec('2025-03-10T12:01:00Z'), retryAfter: 30 });
    });

    t.test('a refusal does not consume quota', async (t) => {
      const [limiter] = await backend.make(t);
      const s = subject();
      const limit = { perMinute: 2, perDay: 3 };
      const now = at('2025-03-10T12:00:10Z');
      t.same((await times(2, limiter, s, limit, now)).map((d) => d.allowed), [true, true]);
      t.same((await times(5, limiter, s, limit, now)).map((d) => d.reason), Array(5).fill('rate_limited'));
      // Next minute: the day has exactly one left, so the five refusals were not counted.
      const next = await limiter.consume(s, limit, BAN, now + 60_000);
      t.same(next, { allowed: true, reason: 'ok', limit: 3, remaining: 0, reset: sec('2025-03-11T00:00:00Z'), retryAfter: 0 });
      const dayOver = await limiter.consume(s, limit, BAN, now + 60_000);
      t.same(dayOver, { allowed: false, reason: 'rate_limited', limit: 3, remaining: 0, reset: sec('2025-03-11T00:00:00Z'), retryAfter: 11 * 3600 + 58 * 60 + 50 });
    });

    t.test('minute boundary: …:59.999 belongs to the old minute, :00.000 to the new one', async (t) => {
      const [limiter] = await backend.make(t);
      const s = subject();
      const limit = { perMinute: 1, perDay: 100 };
      const last = at('2025-03-10T12:00:59.999Z');
      t.equal((await limiter.consume(s, limit, BAN, last)).allowed, true);
      const refused = await limiter.consume(s, limit, BAN, last);
      t.match(refused, { allowed: false, reset: sec('2025-03-10T12:01:00Z'), retryAfter: 1 });
      const next = await limiter.consume(s, limit, BAN, last + 1);
      t.match(next, { allowed: true, remaining: 0, reset: sec('2025-03-10T12:02:00Z') });
    });

    t.test('day boundary: 23:59:59.999 UTC → 00:00:00.000 UTC', async (t) => {
      const [limiter] = await backend.make(t);
      const s = subject();
      const limit = { perMinute: 10, perDay: 2 };
      const last = at('2025-03-10T23:59:59.999Z');
      await times(2, limiter, s, limit, last);
      const refused = await limiter.consume(s, limit, BAN, last);
      t.same(refused, { allowed: false, reason: 'rate_limited', limit: 2, remaining: 0, reset: sec('2025-03-11T00:00:00Z'), retryAfter: 1 });
      const next = await limiter.consume(s, limit, BAN, last + 1);
      t.same(next, { allowed: true, reason: 'ok', limit: 2, remaining: 1, reset: sec('2025-03-12T00:00:00Z'), retryAfter: 0 });
    });

    t.test('the window with fewest remaining is reported; a tie reports the day', async (t) => {
      const [limiter] = await backend.make(t);
      const now = at('2025-03-10T08:30:00Z');
      const dayEnd = sec('2025-03-11T00:00:00Z');
      t.match(await limiter.consume(subject(), { perMinute: 10, perDay: 3 }, BAN, now), { limit: 3, remaining: 2, reset: dayEnd });
      t.match(await limiter.consume(subject(), { perMinute: 3, perDay: 3 }, BAN, now), { limit: 3, remaining: 2, reset: dayEnd });
      t.match(await limiter.consume(subject(), { perMinute: 2, perDay: 100 }, BAN, now), { limit: 2, remaining: 1, reset: sec('2025-03-10T08:31:00Z') });
      // Both exhausted: the day ends later, so it is the honest Retry-After.
      const s = subject();
      await limiter.consume(s, { perMinute: 1, perDay: 1 }, BAN, now);
      t.match(await limiter.consume(s, { perMinute: 1, perDay: 1 }, BAN, now), { limit: 1, reset: dayEnd, retryAfter: 15.5 * 3600 });
    });

    t.test('a limit changed mid-window keeps the counts', async (t) => {
      const [limiter] = await backend.make(t);
      const s = subject();
      const now = at('2025-03-10T08:30:00Z');
      await times(3, limiter, s, { perMinute: 5, perDay: 100 }, now);
      t.match(await limiter.consume(s, { perMinute: 4, perDay: 100 }, BAN, now), { allowed: true, limit: 4, remaining: 0 });
      t.match(await limiter.consume(s, { perMinute: 3, perDay: 100 }, BAN, now), { allowed: false, limit: 3, remaining: 0 });
      t.match(await limiter.consume(s, { perMinute: 10, perDay: 100 }, BAN, now), { allowed: true, limit: 10, remaining: 5 });
    });

    t.test('more than 10 refusals within 60 s ban the subject', async (t) => {
      const [limiter] = await backend.make(t);
      const s = subject();
      const limit = { perMinute: 1, perDay: 1000 };
      const now = at('2025-03-10T08:30:00Z');
      t.equal((await limiter.consume(s, limit, BAN, now)).allowed, true);
      const refused = await times(10, limiter, s, limit, now + 1000);
      t.same(refused.map((d) => d.reason), Array(10).fill('rate_limited'));
      // The 11th refusal is answered with the ban itself, so its Retry-After is already honest.
      const banned = await limiter.consume(s, limit, BAN, now + 2000);
      t.same(banned, { allowed: false, reason: 'key_banned', limit: 1, remaining: 0, reset: (now + 2000) / 1000 + 900, retryAfter: 900 });
      // A new minute has room, but the ban holds, and it counts down.
      t.match(await limiter.consume(s, limit, BAN, now + 120_000), { reason: 'key_banned', retryAfter: 900 - 118 });
      t.match(await limiter.consume(s, { perMinute: 50, perDay: 1000 }, BAN, now + 2000 + 899_001), { reason: 'key_banned', limit: 50, retryAfter: 1 });
    });

    t.test('refusals spread over more than the ban window do not ban', async (t) => {
      const [limiter] = await backend.make(t);
      const s = subject();
      const limit = { perMinute: 1, perDay: 1 };
      const now = at('2025-03-10T08:30:00Z');
      t.equal((await limiter.consume(s, limit, BAN, now)).allowed, true);
      t.same((await times(10, limiter, s, limit, now)).map((d) => d.reason), Array(10).fill('rate_limited'));
      t.same((await times(10, limiter, s, limit, now + 61_000)).map((d) => d.reason), Array(10).fill('rate_limited'));
      t.equal((await limiter.consume(s, limit, BAN, now + 62_000)).reason, 'key_banned');
    });

    t.test('a ban ends after banSeconds and banned requests consumed nothing', async (t) => {
      const [limiter] = await backend.make(t);
      const s = subject();
      const limit = { perMinute: 1, perDay: 3 };
      const ban = { refusals: 2, windowSeconds: 10, banSeconds: 60 };
      const now = at('2025-03-10T08:30:00Z');
      t.equal((await limiter.consume(s, limit, ban, now)).allowed, true);
      const answers = [];
      for (let i = 0; i < 8; i++) answers.push((await limiter.consume(s, limit, ban, now + i)).reason);
      t.same(answers, ['rate_limited', 'rate_limited', 'key_banned', 'key_banned', 'key_banned', 'key_banned', 'key_banned', 'key_banned']);
      t.equal((await limiter.consume(s, limit, ban, now + 2 + 59_999)).reason, 'key_banned');
      // The ban ends in the next minute, which has room again.
      t.match(await limiter.consume(s, limit, ban, now + 2 + 60_000), { allowed: true, limit: 1, remaining: 0 });
      // Two of three used today: the refused and banned requests counted nothing.
      t.match(await limiter.consume(s, limit, ban, now + 120_000), { allowed: true, limit: 3, remaining: 0 });
      t.match(await limiter.consume(s, limit, ban, now + 180_000), { allowed: false, reason: 'rate_limited', limit: 3 });
    });

    t.test('a ban that ends starts the refusal count afresh', async (t) => {
      const [limiter] = await backend.make(t);
      const s = subject();
      const limit = { perMinute: 1, perDay: 1 };
      const ban = { refusals: 2, windowSeconds: 60, banSeconds: 10 };
      const now = at('2025-03-10T08:30:00Z');
      await limiter.consume(s, limit, ban, now);
      const answers = [];
      for (let i = 1; i <= 3; i++) answers.push((await limiter.consume(s, limit, ban, now + i)).reason);
      t.same(answers, ['rate_limited', 'rate_limited', 'key_banned']);
      // Still inside the first refusal window, but the ban wiped it.
      t.equal((await limiter.consume(s, limit, ban, now + 20_000)).reason, 'rate_limited');
    });

    t.test('60 parallel calls with a limit of 20: exactly 20 allowed', async (t) => {
      const [limiter] = await backend.make(t);
      const s = subject();
      const limit = { perMinute: 20, perDay: 1000 };
      const now = at('2025-03-10T08:30:00Z');
      const decisions = await Promise.all(Array.from({ length: 60 }, () => limiter.consume(s, limit, { ...BAN, refusals: 1000 }, now)));
      const allowed = decisions.filter((d) => d.allowed);
      t.equal(allowed.length, 20);
      t.same(allowed.map((d) => d.remaining).sort((a, b) => a - b), Array.from({ length: 20 }, (_, i) => i));
    });

    t.test('60 parallel calls from two instances sharing the store: exactly 20 allowed', async (t) => {
      const [a, b] = await backend.make(t, 2);
      const s = subject();
      const limit = { perMinute: 20, perDay: 1000 };
      const ban = { ...BAN, refusals: 1000 };
      const now = at('2025-03-10T08:30:00Z');
      const decisions = await Promise.all(Array.from({ length: 60 }, (_, i) => (i % 2 ? a : b).consume(s, limit, ban, now)));
      t.equal(decisions.filter((d) => d.allowed).length, 20);
    });
  });
}
