// An upgrade keeps the counts: the limiter used to keep one key per counter (`…:m:<minute start s>`,
// `…:d:<day start s>`, `…:ref` {n, end}, `…:ban`); now a subject's state is one hash,
// `portico:rl:{<subject>}`, and a subject without one yet starts from what the old keys hold.
import t from 'tap';
import { Redis } from 'ioredis';
import type { BanPolicy } from '../../src/ratelimit/limiter.ts';
import { RedisLimiter } from '../../src/ratelimit/redis-limiter.ts';
import { startRedis } from '../helpers/redis.ts';

const BAN: BanPolicy = { refusals: 10, windowSeconds: 60, banSeconds: 900 };
const NOW = Date.parse('2025-03-10T08:30:10Z');
const MINUTE_S = Math.floor(NOW / 60_000) * 60;
const DAY_S = Math.floor(NOW / 86_400_000) * 86_400;
const LIMIT = { perMinute: 10, perDay: 100 };

const server = await startRedis();
t.teardown(() => server.stop());
const admin = new Redis(server.url);
t.teardown(() => admin.disconnect());
const limiter = new RedisLimiter(admin);
t.teardown(() => limiter.close());

/** the keys the limiter before this layout wrote for `subject` */
function old(subject: string) {
  const base = `portico:rl:{${subject}}:`;
  return { minute: `${base}m:${MINUTE_S}`, day: `${base}d:${DAY_S}`, ref: `${base}ref`, ban: `${base}ban` };
}

t.test('minute and day counts go on from the old keys', async (t) => {
  const subject = 'acct_up:production';
  const keys = old(subject);
  await admin.set(keys.minute, '7', 'PX', 60_000);
  await admin.set(keys.day, '20', 'PX', 86_400_000);
  t.match(await limiter.consume(subject, LIMIT, BAN, NOW), { allowed: true, limit: 10, remaining: 2 });
  t.match(await admin.hgetall(`portico:rl:{${subject}}`), { minuteUsed: '8', dayUsed: '21' }, 'carried into the hash');
  const ttl = await admin.pttl(`portico:rl:{${subject}}`);
  t.ok(ttl > 0 && ttl <= 86_400_000 - (NOW % 86_400_000) + 1000, `the hash expires with the day (pttl ${ttl})`);

  // read once: an old key written now is not looked at any more
  await admin.set(keys.minute, '0', 'PX', 60_000);
  t.match(await limiter.consume(subject, LIMIT, BAN, NOW), { allowed: true, remaining: 1 });
  t.match(await limiter.consume(subject, LIMIT, BAN, NOW), { allowed: true, remaining: 0 });
  t.match(await limiter.consume(subject, LIMIT, BAN, NOW), { allowed: false, reason: 'rate_limited' });
});

t.test('a ban goes on until its end', async (t) => {
  const subject = 'acct_up_ban:production';
  await admin.set(old(subject).ban, String(NOW + 60_000), 'PX', 60_000);
  t.match(await limiter.consume(subject, LIMIT, BAN, NOW), { allowed: false, reason: 'key_banned', retryAfter: 60 });
  t.equal(await admin.hget(`portico:rl:{${subject}}`, 'ban'), String(NOW + 60_000));
});

t.test('refusals go on counting towards a ban', async (t) => {
  const subject = 'acct_up_ref:production';
  const keys = old(subject);
  await admin.set(keys.minute, '10', 'PX', 60_000);
  await admin.set(keys.day, '10', 'PX', 86_400_000);
  await admin.hset(keys.ref, 'n', '10', 'end', String(NOW + 30_000));
  t.match(await limiter.consume(subject, LIMIT, BAN, NOW), { allowed: false, reason: 'key_banned', retryAfter: 900 }, 'the 11th refusal bans');
});
