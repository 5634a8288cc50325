// The store contract (contract-cases.ts) on a real Redis Cluster: three primaries with a replica
// each; state keys share the `{portico}:` hash tag, every acknowledged write waits for a replica.
import t, { type Test } from 'tap';
import { Cluster } from 'ioredis';
import { connectRedis, openRedisStores } from '../../src/state/redis.ts';
import type { Stores } from '../../src/state/types.ts';
import { RedisLimiter } from '../../src/ratelimit/redis-limiter.ts';
import { keySlot } from '../../src/state/redis-slot.ts';
import { cli, startCluster } from '../helpers/redis-topology.ts';
import { contract } from './contract-cases.ts';

const topology = await startCluster();
t.teardown(() => topology.stop());
const admin = new Cluster(topology.nodes.slice(0, 3).map((n) => ({ host: '127.0.0.1', port: n.port })));
admin.on('error', () => undefined);
t.teardown(() => admin.disconnect());

let unreplicated = 0;
async function stores(t: Test): Promise<Stores> {
  const conns = connectRedis(topology.url, { commandTimeoutMs: 1000, onUnreplicatedWrite: () => unreplicated++ });
  await Promise.all([conns.client, conns.subscriber].map((c) => (c.status === 'ready' ? undefined : new Promise((r) => c.once('ready', r)))));
  const opened = await openRedisStores(conns);
  t.teardown(() => opened.close());
  return opened;
}

contract({
  name: 'cluster',
  async open(t) {
    await Promise.all(admin.nodes('master').map((node) => node.flushall()));
    return { stores: await stores(t), again: () => stores(t) };
  },
});

t.test('a replica confirmed every acknowledged write (WAIT)', async (t) => {
  t.equal(unreplicated, 0);
});

t.test('the limiter follows its subject\'s slot through a reshard: no failed call, one exact count', async (t) => {
  // a subject in the lowest slots of a primary, which redis-cli --cluster reshard moves first
  let subject = '';
  for (let i = 0; !subject; i++) if (keySlot(`reshard-${i}`) < 300) subject = `reshard-${i}`;
  const slot = keySlot(subject);
  const from = await topology.primaryOf(slot);
  const target = (await primaries()).find((p) => p !== from)!;

  const conns = connectRedis(topology.url, { commandTimeoutMs: 1000 });
  await new Promise((resolve) => (conns.client.status === 'ready' ? resolve(undefined) : conns.client.once('ready', resolve)));
  const limiter = new RedisLimiter(conns);
  t.teardown(async () => {
    await limiter.close();
    conns.client.disconnect();
    conns.subscriber.disconnect();
  });
  const limit = { perMinute: 1_000_000, perDay: 1_000_000 };
  const ban = { refusals: 1_000_000, windowSeconds: 60, banSeconds: 1 };
  let allowed = 0;
  let failed = 0;
  let running = true;
  const callers = Array.from({ length: 20 }, async () => {
    while (running) {
      try {
        if ((await limiter.consume(subject, limit, ban)).allowed) allowed++;
      } catch {
        failed++;
      }
    }
  });
  await topology.reshard(from, target, slot + 1);
  running = false;
  await Promise.all(callers);
  t.equal((await topology.primaryOf(slot)).port, target.port, 'the slot moved');
  t.equal(failed, 0, 'no call failed');
  const day = Math.floor(Date.now() / 86_400_000) * 86_400;
  t.equal(Number(await admin.get(`portico:rl:{${subject}}:d:${day}`)), allowed, 'the counter holds every allowed call once');
});

/** the nodes that are primaries now */
async function primaries() {
  const out = [];
  for (const node of topology.nodes) if ((await cli(node.port, 'ROLE')).startsWith('master')) out.push(node);
  return out;
}
