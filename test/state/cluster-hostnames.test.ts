// A Redis Cluster that names its nodes by hostname (`cluster-announce-hostname`,
// `cluster-preferred-endpoint-type hostname`, as Kubernetes deployments do): the slot map holds
// `localhost:<port>` while the URL's seeds are addresses, so every node connection is one the cluster
// client makes itself. With node connections forced eager, its ready check failed on each of them
// again and again and Portico never started ("Cluster isn't ready"). State and the limiter's own
// connection (limiter-nodes.ts, which connects to the names in the slot map) work here.
import t from 'tap';
import type { Cluster } from 'ioredis';
import { connectRedis } from '../../src/state/redis.ts';
import { RedisLimiter } from '../../src/ratelimit/redis-limiter.ts';
import { startCluster } from '../helpers/redis-topology.ts';

t.test('a cluster announcing hostnames: ready, state written, the limiter counts', async (t) => {
  const topology = await startCluster({ hostnames: true });
  t.teardown(() => topology.stop());
  const conns = connectRedis(topology.url, { commandTimeoutMs: 1000 });
  t.teardown(() => {
    conns.subscriber.disconnect();
    conns.client.disconnect();
  });
  const { client } = conns;
  const ready = await new Promise<boolean>((resolve) => {
    if (client.status === 'ready') return resolve(true);
    client.once('ready', () => resolve(true));
    setTimeout(() => resolve(false), 5000);
  });
  t.ok(ready, 'the cluster client is ready within the start\'s 5 s wait');
  const named = Object.values((client as unknown as Cluster).slots).flat();
  t.ok(named.length > 0 && named.every((node) => node.startsWith('localhost:')), 'the slot map names the nodes by hostname');

  t.equal(await client.set('portico:hostnames-test', 'written'), 'OK');
  t.equal(await client.get('portico:hostnames-test'), 'written');

  const limiter = new RedisLimiter(conns);
  t.teardown(() => limiter.close());
  const limit = { perMinute: 100_000, perDay: 1000 };
  const ban = { refusals: 1000, windowSeconds: 60, banSeconds: 60 };
  const first = await limiter.consume('hostnames-test', limit, ban);
  const second = await limiter.consume('hostnames-test', limit, ban);
  t.equal(first.remaining, limit.perDay - 1, 'the limiter\'s own connection reaches the node by its name');
  t.equal(second.remaining, limit.perDay - 2, 'and counts there');
});
