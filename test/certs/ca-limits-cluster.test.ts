// The CA limits and the order queue on a real Redis Cluster (three primaries, three replicas): the
// limit script touches several keys at once, which a Cluster allows only within one slot — the
// issuer's hash tag keeps them there — and concurrent takes from several clients stay exact.
import t from 'tap';
import { Cluster } from 'ioredis';
import { openRedisCaLimits } from '../../src/certs/ca-limits-redis.ts';
import { openRedisOrderQueue } from '../../src/certs/order-queue.ts';
import { orderRequests } from '../../src/certs/ca-limits.ts';
import { resolveIssuers } from '../../src/certs/issuers.ts';
import { startCluster } from '../helpers/redis-topology.ts';

const topology = await startCluster();
t.teardown(() => topology.stop());

t.test('one order budget per issuer across clients of a Cluster', async (t) => {
  const clients = Array.from({ length: 3 }, () => new Cluster(topology.nodes.slice(0, 3).map((n) => ({ host: '127.0.0.1', port: n.port }))));
  t.teardown(() => clients.forEach((c) => c.disconnect()));
  const [issuer] = resolveIssuers([{ directory: 'https://ca.test/dir', limits: { newOrdersPer3h: 4, certsPerDomainPerWeek: 2, failedValidationsPerHour: 1 } }], [], {});
  const stores = clients.map((c) => openRedisCaLimits(c));
  // every order touches three buckets (account, registered domain, hostname) in one script
  const hostnames = Array.from({ length: 12 }, (_, i) => `h${i}.${['a.example', 'b.example', 'c.example'][i % 3]}`);
  const results = await Promise.all(hostnames.map((h, i) => stores[i % 3].take(issuer.id, orderRequests(issuer, h), 1_000)));
  t.equal(results.filter((r) => r.ok).length, 4, 'exactly the 4 orders the budget holds');
  t.ok(results.every((r) => r.ok || r.limit === 'new_orders' || r.limit === 'certs_per_domain'));

  const queue = openRedisOrderQueue(clients[0]);
  await queue.add('z.example', 3);
  await queue.add('y.example', 1);
  await queue.add('y.example', 9);
  t.same(await openRedisOrderQueue(clients[1]).head(10), [{ hostname: 'y.example', since: 1 }, { hostname: 'z.example', since: 3 }], 'in order, a second add keeps the place');
});
