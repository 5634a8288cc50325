// The store contract (contract-cases.ts) on a real Redis Cluster: three primaries with a replica
// each; state keys share the `{portico}:` hash tag, every acknowledged write waits for a replica.
import t, { type Test } from 'tap';
import { Cluster } from 'ioredis';
import { connectRedis, openRedisStores } from '../../src/state/redis.ts';
import type { Stores } from '../../src/state/types.ts';
import { startCluster } from '../helpers/redis-topology.ts';
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
