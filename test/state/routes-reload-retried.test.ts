// routes-reload-not-retried (the domain index): when the change-notice subscriber reconnects, an
// instance reloads its routing index, since it may have missed notices. After a failover the
// subscriber can be back before reads work; that reload failed and was never tried again, so a domain
// removed while the notices were missed stayed routed on this instance until its next notice or a
// restart. On a real redis-server: the route is removed in Redis with no notice (one this instance
// missed), reads are refused (an ACL without @read) while the subscriber's connection is cut and made
// again, then allowed again.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { connectRedis, openRedisStores } from '../../src/state/redis.ts';
import { SET_ROUTE, SET_ROUTE_KEYS } from '../../src/state/redis-routes.ts';
import type { Domain } from '../../src/state/types.ts';
import { startRedis } from '../helpers/redis.ts';

const server = await startRedis();
t.teardown(() => server.stop());
const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
t.teardown(() => admin.disconnect());

async function eventually(check: () => boolean, withinMs: number): Promise<boolean> {
  for (const deadline = Date.now() + withinMs; Date.now() < deadline; await sleep(20)) if (check()) return true;
  return check();
}

t.test('routes-reload-not-retried: a reload of the routing index that failed at a reconnect is tried again until it works', async (t) => {
  const conns = connectRedis(server.url, 1000);
  const stores = await openRedisStores(conns);
  t.teardown(() => stores.close());
  const hostname = 'missed.example.com';
  const domain: Domain = { hostname, projectId: 'prj_1', accountId: 'acc_1', primary: false, status: 'pending', apex: false, records: [], diagnostics: [], certificate: { status: 'none' }, createdAt: '2026-11-29T09:00:00.000Z' };
  await stores.domains.create(domain);
  await stores.domains.update({ ...domain, status: 'verified' });
  t.ok(stores.domains.indexedRoute(hostname), 'the domain is routed');

  // removed by another instance whose notice never came
  await admin.eval(SET_ROUTE, SET_ROUTE_KEYS.length, ...SET_ROUTE_KEYS, hostname, '');
  await sleep(100);
  t.ok(stores.domains.indexedRoute(hostname), 'still routed here: the notice was missed');

  try {
    await admin.call('ACL', 'SETUSER', 'default', '-@read');
    const reconnected = new Promise((resolve) => conns.subscriber.once('ready', resolve));
    t.ok(Number(await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub')) >= 1, "the subscriber's connection is cut");
    await reconnected;
    // its reload runs now and is refused
    await sleep(300);
    t.ok(stores.domains.indexedRoute(hostname), 'still routed while nothing can be read');
  } finally {
    await admin.call('ACL', 'SETUSER', 'default', '+@all');
  }
  t.ok(await eventually(() => stores.domains.indexedRoute(hostname) === null, 3000), 'no longer routed once reads work again');
});
