// What only the in-process backend has to do itself: forget subjects whose counters are over.
import t from 'tap';
import type { BanPolicy } from '../../src/ratelimit/limiter.ts';
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
