// What only the Redis backend has: key names and TTLs, the server clock, script reloading, the
// in-process ban cache.
import t from 'tap';
import { Redis } from 'ioredis';
import type { BanPolicy } from '../../src/ratelimit/limiter.ts';
import { RedisLimiter } from '../../src/ratelimit/redis-limiter.ts';
import { startRedis } from '../helpers/redis.ts';

const BAN: BanPolicy = { refusals: 10, windowSeconds: 60, banSeconds: 900 };
const NOW = Date.parse('2025-03-10T08:30:00Z');

const server = await startRedis();
t.teardown(() => server.stop());

async function newClient(): Promise<Redis> {
  const client = new Redis(server.url, {
    enableAutoPipelining: true,
    enableOfflineQueue: false,
    commandTimeout: 1000,
    maxRetriesPerRequest: 1,
  });
  client.on('error', () => {});
  await new Promise((resolve) => client.once('ready', resolve));
  t.teardown(() => client.disconnect());
  return client;
}

const admin = await newClient();

async function scriptCalls(): Promise<number> {
  const stats = await admin.info('commandstats');
  let calls = 0;
  for (const m of stats.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) calls += Number(m[1]);
  return calls;
}

t.test('every key has a TTL and carries the subject hash tag', async (t) => {
  const limiter = new RedisLimiter(await newClient());
  const limit = { perMinute: 1, perDay: 5 };
  // allowed (minute + day keys), refused (refusal key), banned (ban key), with both clocks
  for (let i = 0; i < 13; i++) await limiter.consume('acct_ttl:production', limit, BAN, NOW);
  for (let i = 0; i < 3; i++) await limiter.consume('acct_ttl:staging', limit, BAN);
  // A brace in a subject must not end the hash tag early.
  for (let i = 0; i < 13; i++) await limiter.consume('odd}{subject', limit, BAN, NOW);

  const keys = (await admin.keys('portico:rl:*')).sort();
  t.ok(keys.length >= 3, `found ${keys.length} keys`);
  t.same(keys.filter((k) => k.includes('acct_ttl:production')), ['portico:rl:{acct_ttl:production}'], 'one key per subject');
  t.match(await admin.hgetall('portico:rl:{acct_ttl:production}'), { minute: String(Math.floor(NOW / 60_000) * 60_000), minuteUsed: '1', day: String(Math.floor(NOW / 86_400_000) * 86_400_000), dayUsed: '1', ban: String(NOW + 900_000) });
  // the ban (15 min) did not shorten the key's life below its day window's (15.5 h left, + 1 s)
  const dayTtl = await admin.pttl('portico:rl:{acct_ttl:production}');
  t.ok(dayTtl > 55_000_000 && dayTtl <= 55_801_000, `expires with the day (pttl ${dayTtl})`);
  const odd = keys.filter((k) => k.includes('odd'));
  t.same(odd.map(hashTag), Array(odd.length).fill('odd%7D%7Bsubject'));
  for (const key of keys) {
    const ttl = await admin.pttl(key);
    t.ok(ttl > 0 && ttl <= 86_401_000, `${key} expires (pttl ${ttl})`);
  }
});

t.test('the refusal counter has a TTL while it counts', async (t) => {
  const limiter = new RedisLimiter(await newClient());
  await limiter.consume('acct_ref:production', { perMinute: 0, perDay: 0 }, BAN, NOW);
  const ttl = await admin.pttl('portico:rl:{acct_ref:production}');
  t.ok(ttl > 0 && ttl <= 60_000, `pttl ${ttl}`);
});

t.test('without an injected clock the windows follow the Redis server time', async (t) => {
  const limiter = new RedisLimiter(await newClient());
  const [seconds] = await admin.time();
  const decision = await limiter.consume('acct_clock:production', { perMinute: 2, perDay: 100 }, BAN);
  const minuteEnd = (Math.floor(Number(seconds) / 60) + 1) * 60;
  // The call may have crossed into the next minute since TIME was read.
  t.ok(decision.reset === minuteEnd || decision.reset === minuteEnd + 60, `reset ${decision.reset}`);
  t.match(decision, { allowed: true, limit: 2, remaining: 1 });
});

t.test('SCRIPT FLUSH in the middle of traffic causes no errors and no lost counts', async (t) => {
  const clients = [await newClient(), await newClient()];
  const limiters = clients.map((c) => new RedisLimiter(c));
  const limit = { perMinute: 1_000_000, perDay: 1_000_000 };
  let errors = 0;
  let allowed = 0;
  for (let round = 0; round < 20; round++) {
    const batch = Array.from({ length: 50 }, (_, i) => limiters[i % 2].consume('acct_flush:production', limit, BAN, NOW)
      .then((d) => { if (d.allowed) allowed++; }, () => { errors++; }));
    // Flushed while the batch is queued and in flight, from another connection.
    if (round % 3 === 1) batch.push(admin.script('FLUSH').then(() => undefined));
    await Promise.all(batch);
  }
  t.equal(errors, 0);
  t.equal(allowed, 1000);
  // The flush did bite: Redis answered NOSCRIPT, and the limiter resent those calls with the script.
  t.match(await admin.info('errorstats'), /errorstat_NOSCRIPT:count=[1-9]/);
  t.equal(await admin.hget('portico:rl:{acct_flush:production}', 'minuteUsed'), '1000');
});

t.test('a banned subject is answered in process until its ban ends', async (t) => {
  const limiter = new RedisLimiter(await newClient());
  const limit = { perMinute: 1, perDay: 100 };
  for (let i = 0; i < 12; i++) await limiter.consume('acct_ban:production', limit, BAN, NOW);
  const before = await scriptCalls();
  for (let i = 0; i < 100; i++) {
    const d = await limiter.consume('acct_ban:production', limit, BAN, NOW + 1000);
    if (d.reason !== 'key_banned') t.fail(`call ${i}: ${d.reason}`);
  }
  t.equal(await scriptCalls(), before, 'no script call while banned');
  // Ban over: back to Redis, which has a fresh minute for it.
  t.match(await limiter.consume('acct_ban:production', limit, BAN, NOW + 900_000), { allowed: true });
  t.equal(await scriptCalls(), before + 1);
});

t.test('a ban set by another instance is cached once seen', async (t) => {
  const a = new RedisLimiter(await newClient());
  const b = new RedisLimiter(await newClient());
  const limit = { perMinute: 0, perDay: 0 };
  for (let i = 0; i < 11; i++) await a.consume('acct_ban2:production', limit, BAN, NOW);
  t.match(await b.consume('acct_ban2:production', limit, BAN, NOW + 5000), { reason: 'key_banned', retryAfter: 895 });
  const before = await scriptCalls();
  await b.consume('acct_ban2:production', limit, BAN, NOW + 6000);
  t.equal(await scriptCalls(), before);
});

t.test('close() leaves the shared client open', async (t) => {
  const client = await newClient();
  const limiter = new RedisLimiter(client);
  await limiter.close();
  t.equal(await client.ping(), 'PONG');
});

function hashTag(key: string): string {
  const open = key.indexOf('{');
  const close = key.indexOf('}', open + 1);
  return key.slice(open + 1, close);
}
