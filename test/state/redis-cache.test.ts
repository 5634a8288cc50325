// The Redis store's cache of hot reads (keys, accounts, category lists), against a real redis-server:
// one read for concurrent misses, a read in flight when a notice arrives is not kept, and entries are
// read again in the background before they expire.
import t, { type Test } from 'tap';
import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { connectRedis, openRedisStores } from '../../src/state/redis.ts';
import type { ApiKey, Stores } from '../../src/state/types.ts';
import { startRedis } from '../helpers/redis.ts';

const CREATED = '2025-03-10T08:30:00.000Z';
const REVOKED = '2025-03-11T09:00:00.000Z';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const server = await startRedis();
t.teardown(() => server.stop());
const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
admin.on('error', () => undefined);
t.teardown(() => admin.disconnect());

function apiKey(id: string): ApiKey {
  return { id, accountId: 'acct_1', environment: 'production', hash: createHash('sha256').update(id).digest('hex'), createdAt: CREATED };
}

/** a key written straight into Redis, without a change notice */
async function writeKey(key: ApiKey): Promise<void> {
  await admin.set(`portico:key:${key.id}`, JSON.stringify(key));
  await admin.set(`portico:keyhash:${key.hash}`, key.id);
}

async function stores(t: Test, now?: () => number): Promise<Stores> {
  const conns = connectRedis(server.url, 1000);
  await Promise.all([conns.client, conns.subscriber].map((c) => (c.status === 'ready' ? undefined : new Promise((r) => c.once('ready', r)))));
  const opened = await openRedisStores(conns, now);
  t.teardown(() => opened.close());
  return opened;
}

async function gets(): Promise<number> {
  const stats = await admin.info('commandstats');
  return Number(/^cmdstat_get:calls=(\d+)/m.exec(stats)?.[1] ?? 0);
}

t.test('concurrent misses for one key make one read', async (t) => {
  const b = await stores(t);
  const key = apiKey('key_herd');
  await writeKey(key);
  const before = await gets();
  const found = await Promise.all(Array.from({ length: 50 }, () => b.keys.findByHash(key.hash)));
  t.ok(found.every((k) => k?.id === 'key_herd'));
  t.equal(await gets() - before, 2, 'one GET of the hash, one of the key: not 100');
  await b.keys.findByHash(key.hash);
  t.equal(await gets() - before, 2, 'then answered from the cache');
});

t.test('a read in flight when a notice arrives is answered but not kept', async (t) => {
  const b = await stores(t);
  const key = apiKey('key_race');
  await writeKey(key);
  const reading = b.keys.findByHash(key.hash);
  // the notice overtakes the read (two round trips): what it read may predate the change
  await admin.publish('portico:invalidate', `key:${key.hash}`);
  t.equal((await reading)?.id, 'key_race');
  await sleep(20);
  const before = await gets();
  await b.keys.findByHash(key.hash);
  t.equal(await gets() - before, 2, 'read again, not answered from what the earlier read brought');
});

t.test('an entry is read again in the background after 50 s; none is older than 60 s', async (t) => {
  let clock = Date.parse(CREATED);
  const b = await stores(t, () => clock);
  const key = apiKey('key_refresh');
  await writeKey(key);
  t.strictSame(await b.keys.findByHash(key.hash), key);
  // changed by something that never published (a lost notice)
  await admin.set('portico:key:key_refresh', JSON.stringify({ ...key, revokedAt: REVOKED }));

  clock += 49_000;
  const quiet = await gets();
  t.strictSame(await b.keys.findByHash(key.hash), key, 'at 49 s: the cache, no read');
  t.equal(await gets(), quiet);

  clock += 2_000;
  t.strictSame(await b.keys.findByHash(key.hash), key, 'at 51 s: still the cached copy, without waiting');
  await sleep(50);
  t.strictSame(await b.keys.findByHash(key.hash), { ...key, revokedAt: REVOKED }, 'the background read has replaced it');
});

t.test('an account whose plan changes is read again at once on the other instance', async (t) => {
  const a = await stores(t);
  const b = await stores(t);
  await a.accounts.create({ id: 'acct_plan', plan: 'free', createdAt: CREATED });
  t.equal((await b.accounts.get('acct_plan'))?.plan, 'free');
  await a.accounts.update({ id: 'acct_plan', plan: 'pro', createdAt: CREATED });
  let plan: string | undefined;
  for (let i = 0; i < 100 && plan !== 'pro'; i++) {
    plan = (await b.accounts.get('acct_plan'))?.plan;
    if (plan !== 'pro') await sleep(10);
  }
  t.equal(plan, 'pro');
});
