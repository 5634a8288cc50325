// The limiter's connections per primary (limiter-nodes.ts), against two real redis-servers standing in
// for two primaries: a call goes to the primary the topology names for its slot, and the connection to
// a server that is no longer a primary is closed at the next sweep (every 5 s), but not while the
// topology names no primary at all (a failover under way). The topology here is what ioredis reports
// through redis-connect.ts (primaryFor, primaries), set by hand; the redirections and failovers of real
// topologies are in test/process/redis-cluster.test.ts and redis-sentinel.test.ts.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { LimiterNodes } from '../../src/ratelimit/limiter-nodes.ts';
import { LIMITER_SCRIPT } from '../../src/ratelimit/limiter-script.ts';
import { bulk } from '../../src/ratelimit/resp.ts';
import { startRedis } from '../helpers/redis.ts';

const SWEEP_MS = 5_000;
const a = await startRedis();
const b = await startRedis();
t.teardown(async () => {
  await a.stop();
  await b.stop();
});
const address = (url: string) => new URL(url).host;

async function limiterClients(url: string): Promise<number> {
  const admin = new Redis(url, { lazyConnect: true });
  try {
    const list = await admin.client('LIST') as string;
    return list.split('\n').filter((line) => / name=portico-limiter /.test(line)).length;
  } finally {
    admin.disconnect();
  }
}

// the script calls a server has run (EVALSHA, and EVAL when the script was not loaded yet): where a
// call went, whatever minute it fell in (the counters start again each minute)
async function scriptCalls(url: string): Promise<number> {
  const admin = new Redis(url, { lazyConnect: true });
  try {
    const stats = await admin.info('commandstats');
    return [...stats.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)].reduce((sum, m) => sum + Number(m[1]), 0);
  } finally {
    admin.disconnect();
  }
}

// one limiter call: numkeys, its key, `now` from Redis, the limits and the ban policy
const ARGS = [bulk('1'), bulk('portico:rl:{nodes-test}'), bulk(''), bulk('1000'), bulk('10000'), bulk('10'), bulk('60000'), bulk('60000')].join('');

t.test('calls follow the named primary; the old one\'s connection closes at the next sweep, not during a failover', async (t) => {
  let primary: string | null = address(a.url);
  const nodes = new LimiterNodes({ primaryFor: () => primary, primaries: () => (primary ? [primary] : []), refreshTopology: () => undefined }, { commandTimeoutMs: 1000, connectionName: 'portico-limiter' }, LIMITER_SCRIPT);
  t.teardown(() => nodes.close());

  const first = await nodes.run(0, ARGS, 8) as number[];
  t.equal(first[0], 0, 'the call on the first primary is allowed');
  t.equal(await limiterClients(a.url), 1, 'one limiter connection to the first primary');

  primary = address(b.url);
  const before = { a: await scriptCalls(a.url), b: await scriptCalls(b.url) };
  const second = await nodes.run(0, ARGS, 8) as number[];
  t.equal(second[0], 0, 'the call on the new primary is allowed');
  t.same({ a: await scriptCalls(a.url), b: await scriptCalls(b.url) }, { a: before.a, b: before.b + 1 }, 'it ran on the new primary');
  t.equal(await limiterClients(b.url), 1, 'one limiter connection to the new primary');

  primary = null;
  await sleep(SWEEP_MS + 500);
  t.equal(await limiterClients(a.url), 1, 'with no primary named (a failover), a sweep closes nothing');
  await t.rejects(nodes.run(0, ARGS, 8), { code: 'REDIS_CONNECTION' }, 'and a call fails at once');

  primary = address(b.url);
  await sleep(SWEEP_MS + 500);
  t.equal(await limiterClients(a.url), 0, 'the sweep closed the connection to the server that is no longer a primary');
  t.equal(await limiterClients(b.url), 1, 'and kept the one to the primary');
  const calls = await scriptCalls(b.url);
  const third = await nodes.run(0, ARGS, 8) as number[];
  t.equal(third[0], 0, 'a call is allowed');
  t.equal(await scriptCalls(b.url), calls + 1, 'calls still go to the primary, on the kept connection');
  t.equal(await limiterClients(b.url), 1, 'still one connection to it');
});
