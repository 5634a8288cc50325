// The limiter's own Redis connection (limiter-connection.ts), against a real redis-server: one timer
// for all waiting calls, answers kept in step after a timeout, a broken connection, the client's
// password and database, and its end.
import t, { type Test } from 'tap';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import type { BanPolicy } from '../../src/ratelimit/limiter.ts';
import { RedisLimiter } from '../../src/ratelimit/redis-limiter.ts';
import { startRedis } from '../helpers/redis.ts';

const TIMEOUT_MS = 150;
const SLACK_MS = 100;
const BAN: BanPolicy = { refusals: 10, windowSeconds: 60, banSeconds: 900 };
const LIMIT = { perMinute: 100_000, perDay: 1_000_000 };
const NOW = Date.parse('2025-03-10T08:30:00Z');

const server = await startRedis();
t.teardown(() => server.stop());

async function newClient(url = server.url, options: { password?: string; db?: number; connectionName?: string } = {}): Promise<Redis> {
  const client = new Redis(url, { enableAutoPipelining: true, enableOfflineQueue: false, commandTimeout: TIMEOUT_MS, maxRetriesPerRequest: 1, ...options });
  client.on('error', () => {});
  await new Promise((resolve) => client.once('ready', resolve));
  t.teardown(() => client.disconnect());
  return client;
}

const admin = await newClient();

function freeze(t: Test, redis = server): () => void {
  const pid = redis.process.pid!;
  process.kill(pid, 'SIGSTOP');
  const thaw = () => { try { process.kill(pid, 'SIGCONT'); } catch { /* already gone */ } };
  t.teardown(thaw);
  return thaw;
}

t.test('100 calls waiting on a frozen Redis share one timer and all end within the timeout', async (t) => {
  const limiter = new RedisLimiter(await newClient());
  await limiter.consume('acct_timer:production', LIMIT, BAN, NOW);
  const thaw = freeze(t);
  const realSetTimeout = globalThis.setTimeout;
  let timers = 0;
  globalThis.setTimeout = ((...args: Parameters<typeof setTimeout>) => { timers++; return realSetTimeout(...args); }) as typeof setTimeout;
  const started = performance.now();
  let calls: Promise<unknown>[];
  try {
    calls = Array.from({ length: 100 }, () => limiter.consume('acct_timer:production', LIMIT, BAN, NOW).catch((err: unknown) => err));
  } finally {
    globalThis.setTimeout = realSetTimeout;
  }
  const outcomes = await Promise.all(calls);
  const ms = performance.now() - started;
  thaw();
  t.ok(timers <= 1, `${timers} timer(s) for 100 calls`);
  t.ok(outcomes.every((o) => (o as { code?: string }).code === 'REDIS_TIMEOUT'), 'every call timed out');
  t.ok(ms < TIMEOUT_MS + SLACK_MS, `all ended after ${ms.toFixed(0)} ms`);
});

t.test('a long burst goes to Redis 32 calls at a time, and every answer reaches its own call', async (t) => {
  const limiter = new RedisLimiter(await newClient());
  t.teardown(() => limiter.close());
  const limit = { perMinute: 1000, perDay: 1000 };
  await limiter.consume('acct_burst_a:production', limit, BAN, NOW); // the connection is open
  const writes: number[] = [];
  const realWrite = net.Socket.prototype.write;
  net.Socket.prototype.write = function (this: net.Socket, chunk: unknown, ...rest: unknown[]) {
    if (typeof chunk === 'string' && chunk.includes('EVALSHA')) writes.push(chunk.split('EVALSHA').length - 1);
    return (realWrite as (...args: unknown[]) => boolean).call(this, chunk, ...rest);
  } as typeof realWrite;
  t.teardown(() => { net.Socket.prototype.write = realWrite; });
  const calls = Array.from({ length: 100 }, (_, i) => limiter.consume(i % 2 ? 'acct_burst_b:production' : 'acct_burst_a:production', limit, BAN, NOW));
  t.same(writes, [32, 32, 32], 'three writes while the burst is still being made');
  const decisions = await Promise.all(calls);
  net.Socket.prototype.write = realWrite;
  t.same(writes, [32, 32, 32, 4], 'the rest at the end of the turn');
  // each subject's calls were counted in the order they were made
  t.same(decisions.filter((_, i) => i % 2 === 0).map((d) => d.remaining), Array.from({ length: 50 }, (_, i) => 998 - i));
  t.same(decisions.filter((_, i) => i % 2 === 1).map((d) => d.remaining), Array.from({ length: 50 }, (_, i) => 999 - i));
});

t.test('answers that arrive after their call timed out do not go to later calls', async (t) => {
  const limiter = new RedisLimiter(await newClient());
  const subject = 'acct_step:production';
  const limit = { perMinute: 1000, perDay: 1000 };
  t.match(await limiter.consume(subject, limit, BAN, NOW), { allowed: true, remaining: 999 });
  const thaw = freeze(t);
  const late = await Promise.all(Array.from({ length: 3 }, () => limiter.consume(subject, limit, BAN, NOW).catch((err: unknown) => err)));
  t.ok(late.every((o) => (o as { code?: string }).code === 'REDIS_TIMEOUT'));
  thaw();
  // Redis counted the three timed-out calls when it woke up; the next answer is this call's own.
  const next = await limiter.consume(subject, limit, BAN, NOW);
  t.match(next, { allowed: true, remaining: 995 });
  t.equal(await admin.hget(`portico:rl:{${subject}}`, 'minuteUsed'), '5');
});

t.test('a broken connection fails its calls at once and the next call opens a new one', async (t) => {
  const dying = await startRedis();
  t.teardown(() => dying.stop());
  const limiter = new RedisLimiter(await newClient(dying.url));
  t.teardown(() => limiter.close());
  await limiter.consume('acct_kill:production', LIMIT, BAN, NOW);
  freeze(t, dying);
  const waiting = limiter.consume('acct_kill:production', LIMIT, BAN, NOW).catch((err: unknown) => err);
  await sleep(10);
  const started = performance.now();
  await dying.kill();
  t.match(await waiting, { code: 'REDIS_CONNECTION' }, 'the call in flight failed');
  t.ok(performance.now() - started < TIMEOUT_MS - 50, `at once (${(performance.now() - started).toFixed(0)} ms), not after the timeout`);
  await t.rejects(limiter.consume('acct_kill:production', LIMIT, BAN, NOW), { code: 'REDIS_CONNECTION' }, 'refused while Redis is gone');
  await sleep(300); // a few reconnection attempts fail meanwhile, so the backoff has grown
  await dying.restart();
  // the breaker's probe after a restart: the call opens the connection at once, without waiting for the backoff
  const probeStarted = performance.now();
  t.match(await limiter.consume('acct_kill:production', LIMIT, BAN, NOW), { allowed: true });
  t.ok(performance.now() - probeStarted < TIMEOUT_MS, 'answered by the restarted Redis');
});

t.test("the client's password and database are used", async (t) => {
  const secured = await startRedis();
  t.teardown(() => secured.stop());
  const setup = await newClient(secured.url);
  await setup.config('SET', 'requirepass', 's3cret-pass');
  const client = await newClient(secured.url, { password: 's3cret-pass', db: 3, connectionName: 'portico' });
  const limiter = new RedisLimiter(client);
  t.teardown(() => limiter.close());
  t.match(await limiter.consume('acct_db:production', LIMIT, BAN, NOW), { allowed: true });
  t.equal(await client.hget('portico:rl:{acct_db:production}', 'minuteUsed'), '1', 'counted in db 3');
  await client.select(0);
  t.equal(await client.hget('portico:rl:{acct_db:production}', 'minuteUsed'), null, 'not in db 0');
  const names = await client.client('LIST');
  t.match(names, /name=portico-limiter /, 'the connection has a name');
});

t.test('the connection ends with the client it was made from', async (t) => {
  const client = await newClient();
  const limiter = new RedisLimiter(client);
  t.match(await limiter.consume('acct_end:production', LIMIT, BAN, NOW), { allowed: true });
  const before = (await admin.client('LIST') as string).split('\n').filter(Boolean).length;
  client.disconnect();
  await sleep(100);
  await t.rejects(limiter.consume('acct_end:production', LIMIT, BAN, NOW), { code: 'REDIS_CONNECTION' });
  const after = (await admin.client('LIST') as string).split('\n').filter(Boolean).length;
  t.equal(after, before - 2, 'the client and the limiter connection are gone');
});
