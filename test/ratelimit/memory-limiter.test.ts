// What only the in-process backend has to do itself: forget subjects whose counters are over, and count
// on from Redis's last decision for a subject when it stands in for Redis.
import t from 'tap';
import type { BanPolicy, Decision } from '../../src/ratelimit/limiter.ts';
import { MemoryLimiter } from '../../src/ratelimit/memory-limiter.ts';

const BAN: BanPolicy = { refusals: 1, windowSeconds: 60, banSeconds: 2 * 86_400 };
const NOW = Date.parse('2025-03-10T23:59:00Z');

t.test('subjects are dropped once their day, refusals and ban are over', async (t) => {
  const limiter = new MemoryLimiter();
  for (let i = 0; i < 1000; i++) await limiter.consume(`ip:10.0.${i >> 8}.${i & 255}`, { perMinute: 5, perDay: 50 }, BAN, NOW);
  // A banned subject outlives its day: the ban is two days long.
  for (let i = 0; i < 3; i++) await limiter.consume('acct_banned:production', { perMinute: 0, perDay: 0 }, BAN, NOW);
  t.equal(limiter.size, 1001);

  await limiter.consume('acct_other:production', { perMinute: 5, perDay: 50 }, BAN, NOW + 30_000);
  t.equal(limiter.size, 1002, 'nothing dropped inside the day');

  await limiter.consume('acct_other:production', { perMinute: 5, perDay: 50 }, BAN, NOW + 120_000);
  t.equal(limiter.size, 2, 'yesterday\'s subjects are gone, the banned one stays');
  t.match(await limiter.consume('acct_banned:production', { perMinute: 5, perDay: 50 }, BAN, NOW + 120_000), { reason: 'key_banned' });

  await limiter.consume('acct_other:production', { perMinute: 5, perDay: 50 }, BAN, NOW + 3 * 86_400_000);
  t.equal(limiter.size, 1);
  await limiter.close();
  t.equal(limiter.size, 0);
});

t.test('decisions are taken when asked and handed back together after the turn\'s reads', async (t) => {
  const limiter = new MemoryLimiter();
  const limit = { perMinute: 3, perDay: 50 };
  const events: string[] = [];
  // six calls in one turn: counted in call order at once (the fourth is the first over the limit)...
  const answers = Array.from({ length: 6 }, (_, i) => limiter.consume('acct_a:production', limit, BAN, NOW).then((d) => {
    events.push(`answer ${i}`);
    return d;
  }));
  process.nextTick(() => events.push('same turn'));
  setImmediate(() => events.push('next check phase'));
  const decisions = await Promise.all(answers);
  t.same(decisions.map((d) => d.allowed), [true, true, true, false, false, false]);
  t.same(decisions.map((d) => d.remaining), [2, 1, 0, 0, 0, 0]);
  // ...but none answers within the turn it was asked in, and all six answer in one go, before
  // anything scheduled for the check phase after them
  await new Promise((resolve) => setImmediate(resolve));
  t.same(events, ['same turn', 'answer 0', 'answer 1', 'answer 2', 'answer 3', 'answer 4', 'answer 5', 'next check phase']);
  await limiter.close();
});

// As the fallback while Redis cannot be asked, the limiter is handed Redis's last decision for the
// subject (`known`) and counts on from it: starting from 0 let a slow Redis cost a whole extra limit.
t.test('a decision of Redis\'s is a floor for the counts of the windows it names', async (t) => {
  const at = Date.parse('2025-03-10T12:00:30Z');
  const minuteEnd = Date.parse('2025-03-10T12:01:00Z') / 1000;
  const minuteBefore = Date.parse('2025-03-10T12:00:00Z') / 1000;
  const dayEnd = Date.parse('2025-03-11T00:00:00Z') / 1000;
  const dayBefore = Date.parse('2025-03-10T00:00:00Z') / 1000;
  const ban: BanPolicy = { refusals: 1000, windowSeconds: 60, banSeconds: 60 };
  const allowedOf = async (limit: { perMinute: number; perDay: number }, known: Decision, now = at, calls = 40) => {
    const limiter = new MemoryLimiter();
    const decisions: Decision[] = [];
    for (let i = 0; i < calls; i++) decisions.push(await limiter.consume('acct_a:production', limit, ban, now, known));
    await limiter.close();
    return { allowed: decisions.filter((d) => d.allowed).length, first: decisions[0] };
  };
  const ok = (limit: number, remaining: number, reset: number): Decision => ({ allowed: true, reason: 'ok', limit, remaining, reset, retryAfter: 0 });

  // 15 of 20 used this minute (the reported window is the minute)
  let r = await allowedOf({ perMinute: 20, perDay: 1000 }, ok(20, 5, minuteEnd));
  t.equal(r.allowed, 5, 'the minute: 5 more, not 20');
  t.match(r.first, { allowed: true, remaining: 4, limit: 20, reset: minuteEnd });

  // 15 used in the minute before: nothing for this minute, but the day holds every minute of it
  r = await allowedOf({ perMinute: 20, perDay: 30 }, ok(20, 5, minuteBefore));
  t.equal(r.allowed, 15, 'a minute before: 15 left of the day, a whole minute otherwise');

  // the day reported (fewest remaining): 15 of 20 used today
  r = await allowedOf({ perMinute: 100, perDay: 20 }, ok(20, 5, dayEnd));
  t.equal(r.allowed, 5, 'the day: 5 more, not 20');

  // a refusal: the exhausted window is all used
  r = await allowedOf({ perMinute: 20, perDay: 1000 }, { allowed: false, reason: 'rate_limited', limit: 20, remaining: 0, reset: minuteEnd, retryAfter: 30 });
  t.equal(r.allowed, 0, 'refused by Redis: still refused');
  t.match(r.first, { reason: 'rate_limited', retryAfter: 30 });

  // a ban lasts until it ends, then the limit applies again
  const banned: Decision = { allowed: false, reason: 'key_banned', limit: 20, remaining: 0, reset: at / 1000 + 90, retryAfter: 90 };
  r = await allowedOf({ perMinute: 20, perDay: 1000 }, banned);
  t.equal(r.allowed, 0, 'banned by Redis: still banned');
  t.match(r.first, { reason: 'key_banned', retryAfter: 90 });
  r = await allowedOf({ perMinute: 20, perDay: 1000 }, banned, at + 91_000);
  t.equal(r.allowed, 20, 'after the ban');

  // yesterday's day window says nothing about today
  r = await allowedOf({ perMinute: 20, perDay: 20 }, ok(20, 5, dayBefore));
  t.equal(r.allowed, 20, "yesterday's count is not today's");

  // the day's last minute: the minute and the day end together; the limit says which was reported
  const lastMinute = Date.parse('2025-03-10T23:59:30Z');
  r = await allowedOf({ perMinute: 20, perDay: 1000 }, ok(20, 5, dayEnd), lastMinute);
  t.equal(r.allowed, 5, "the day's last minute, the minute reported: 5 more");
  r = await allowedOf({ perMinute: 1000, perDay: 20 }, ok(20, 5, dayEnd), lastMinute);
  t.equal(r.allowed, 5, "the day's last minute, the day reported: 5 more");

  // counts made here already are not lowered by an older decision
  const limiter = new MemoryLimiter();
  const limit = { perMinute: 20, perDay: 1000 };
  for (let i = 0; i < 10; i++) await limiter.consume('acct_b:production', limit, ban, at);
  const next = await limiter.consume('acct_b:production', limit, ban, at, ok(20, 15, minuteEnd));
  t.match(next, { allowed: true, remaining: 9 }, 'the higher of the two counts');
  await limiter.close();
});
