// The routing index of Redis instances (DESIGN §8, §9), on a real redis-server: it loads from one
// snapshot plus the routes changed since, follows other instances' changes through pub/sub, makes its
// first snapshot itself, and folds changes into a new snapshot once enough have accumulated.
import t, { type Test } from 'tap';
import { Redis } from 'ioredis';
import { connectRedis, openRedisStores } from '../../src/state/redis.ts';
import { openRedisRouteIndex } from '../../src/state/redis-routes.ts';
import { stateUnavailable, type Domain, type Stores } from '../../src/state/types.ts';
import { startRedis } from '../helpers/redis.ts';

const CREATED = '2025-03-10T08:30:00.000Z';
const server = await startRedis();
t.teardown(() => server.stop());
const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
t.teardown(() => admin.disconnect());

async function instance(t: Test): Promise<Stores> {
  const conns = connectRedis(server.url, 1000);
  await Promise.all([conns.client, conns.subscriber].map((c) => (c.status === 'ready' ? undefined : new Promise((r) => c.once('ready', r)))));
  const stores = await openRedisStores(conns);
  t.teardown(() => stores.close());
  return stores;
}

const domainOf = (i: number, status: Domain['status'] = 'verified'): Domain => ({
  hostname: `d${i}.example.com`, projectId: `prj_${i % 2}`, accountId: 'acc_1', primary: false, status, apex: false, records: [], diagnostics: [], certificate: { status: 'none' }, createdAt: CREATED,
});

async function addVerified(stores: Stores, i: number): Promise<void> {
  await stores.domains.create(domainOf(i, 'pending'));
  await stores.domains.update(domainOf(i));
}

async function eventually(check: () => boolean, withinMs = 1000): Promise<boolean> {
  for (const deadline = Date.now() + withinMs; Date.now() < deadline; await new Promise((r) => setTimeout(r, 10))) if (check()) return true;
  return check();
}

const passthrough = async <T>(run: () => Promise<T>): Promise<T> => {
  try {
    return await run();
  } catch (err) {
    throw stateUnavailable(err);
  }
};

t.test('a new instance loads the snapshot and the changes since; changes elsewhere arrive at once', async (t) => {
  await admin.flushall();
  const a = await instance(t);
  t.ok(await admin.exists('portico:routes:snapshot'), 'the first instance made the first snapshot');
  for (let i = 0; i < 5; i++) await addVerified(a, i);
  t.equal(await admin.zcard('portico:routes:changed'), 5, 'five changes since the snapshot');
  t.same(await a.domains.countByStatus(), { pending: 0, verified: 5, failed: 0 });

  const b = await instance(t);
  for (let i = 0; i < 5; i++) t.same(b.domains.indexedRoute(`d${i}.example.com`), { projectId: `prj_${i % 2}` }, `B routes d${i}`);
  t.equal(b.domains.indexedRoute('d5.example.com'), null);

  await addVerified(a, 5);
  await a.events.publish('domain:d5.example.com'); // as the registry does after every change
  t.ok(await eventually(() => b.domains.indexedRoute('d5.example.com') !== null), 'a domain verified on A is routed on B');
  await a.domains.remove('d1.example.com', CREATED);
  t.equal(a.domains.indexedRoute('d1.example.com'), null, 'A stops routing it the moment the removal is written');
  await a.events.publish('domain:d1.example.com');
  t.ok(await eventually(() => b.domains.indexedRoute('d1.example.com') === null), 'B stops routing it on the notice');
  await a.domains.update({ ...domainOf(2), redirect: { to: 'd0.example.com', status: 308 } });
  await a.events.publish('domain:d2.example.com');
  t.ok(await eventually(() => b.domains.indexedRoute('d2.example.com')?.redirect?.status === 308), 'a new redirect arrives too');
  t.same(await b.domains.countByStatus(), { pending: 0, verified: 5, failed: 0 });
});

t.test('a missed notice: the reload when the subscriber reconnects catches up', async (t) => {
  await admin.flushall();
  const a = await instance(t);
  const b = await instance(t);
  await addVerified(a, 1); // written, never published
  t.equal(b.domains.indexedRoute('d1.example.com'), null);
  await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub'); // every subscriber drops, and reconnects
  t.ok(await eventually(() => b.domains.indexedRoute('d1.example.com') !== null, 3000), 'B reloads its index once it is back');
  t.same(b.domains.indexedRoute('d1.example.com'), { projectId: 'prj_1' });
});

t.test('past the bound one instance writes a new snapshot; later instances start from it', async (t) => {
  await admin.flushall();
  const a = await instance(t);
  for (let i = 0; i < 12; i++) await addVerified(a, i);
  await a.domains.remove('d3.example.com', CREATED);
  const index = openRedisRouteIndex(admin, passthrough, { rebuildAt: 10 });
  t.teardown(() => index.close());
  await index.load();
  await index.maintain();
  t.equal(await admin.zcard('portico:routes:changed'), 0, 'the changes are in the snapshot now');
  t.equal(Number(await admin.get('portico:routes:snapshot-seq')), Number(await admin.get('portico:routes:seq')));
  await addVerified(a, 12);

  const b = await instance(t);
  for (let i = 0; i <= 12; i++) t.equal(b.domains.indexedRoute(`d${i}.example.com`)?.projectId ?? null, i === 3 ? null : `prj_${i % 2}`, `d${i}`);
});

t.test('without a snapshot (it was lost) the next instance builds it from the routes', async (t) => {
  await admin.flushall();
  const a = await instance(t);
  for (let i = 0; i < 3; i++) await addVerified(a, i);
  await admin.del('portico:routes:snapshot', 'portico:routes:snapshot-seq', 'portico:routes:changed');
  const b = await instance(t);
  for (let i = 0; i < 3; i++) t.same(b.domains.indexedRoute(`d${i}.example.com`), { projectId: `prj_${i % 2}` });
  t.ok(await admin.exists('portico:routes:snapshot'), 'and stores it for the next');
});
