// One contract, two backends (STYLE §4, DESIGN §8): every shared case runs against the embedded
// store (memory + durable log in a temp data dir) and the Redis store (a real redis-server).
// What only one backend has (the data-dir lock; pub/sub, fallback reads, the 60 s cache) follows.
import t, { type Test } from 'tap';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Redis } from 'ioredis';
import { openEmbeddedStores } from '../../src/state/embedded.ts';
import { connectRedis, openRedisStores } from '../../src/state/redis.ts';
import type { Account, ApiKey, Category, Domain, Stores } from '../../src/state/types.ts';
import { cleanup, tempDir } from '../helpers/portico.ts';
import { startRedis, type RedisServer } from '../helpers/redis.ts';

const CREATED = '2025-03-10T08:30:00.000Z';
const REVOKED = '2025-03-11T09:00:00.000Z';
const LATER = '2025-03-12T10:00:00.000Z';
// generous: 100 concurrent creates on a busy 2-core test machine
const COMMAND_TIMEOUT_MS = 1000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Polls `read` until it returns `expected` (compared as JSON) or `withinMs` passes; returns the last
 * value. Pub/sub delivery takes a few ms; without it the other instance's cache would answer stale
 * for 60 s, so a 1 s bound still tells the two apart without flaking on a busy machine.
 */
async function eventually<T>(read: () => Promise<T>, expected: unknown, withinMs = 1000): Promise<T> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const value = await read();
    if (JSON.stringify(value) === JSON.stringify(expected) || Date.now() > deadline) return value;
    await sleep(10);
  }
}

function account(id: string, plan: Account['plan'] = 'free'): Account {
  return { id, plan, createdAt: CREATED };
}

function apiKey(id: string, accountId: string, environment: ApiKey['environment'] = 'production'): ApiKey {
  return { id, accountId, environment, hash: createHash('sha256').update(id).digest('hex'), createdAt: CREATED };
}

const server = await startRedis();
t.teardown(() => server.stop());
const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
admin.on('error', () => undefined);
t.teardown(() => admin.disconnect());

/** Redis stores on `url`, closed in teardown. */
async function redisStores(t: Test, url: string, timeoutMs = COMMAND_TIMEOUT_MS, now?: () => number): Promise<Stores> {
  const conns = connectRedis(url, timeoutMs);
  await Promise.all([conns.client, conns.subscriber].map((c) => (c.status === 'ready' ? undefined : new Promise((r) => c.once('ready', r)))));
  const stores = await openRedisStores(conns, now);
  t.teardown(() => stores.close());
  return stores;
}

interface Opened {
  stores: Stores;
  /**
   * The same state seen again: embedded closes the store and reopens its data dir (a restart);
   * Redis opens a second instance on the same server.
   */
  again(): Promise<Stores>;
}

interface Backend {
  name: 'embedded' | 'redis';
  /** a store with no data in it, closed in teardown */
  open(t: Test): Promise<Opened>;
}

async function embeddedAt(t: Test, dataDir: string): Promise<Stores> {
  const stores = await openEmbeddedStores(dataDir);
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await stores.close();
  };
  t.teardown(close);
  return { ...stores, close };
}

const backends: Backend[] = [
  {
    name: 'embedded',
    async open(t) {
      const dataDir = tempDir('state');
      t.teardown(() => cleanup(dataDir));
      let current = await embeddedAt(t, dataDir);
      return {
        stores: current,
        async again() {
          await current.close();
          current = await embeddedAt(t, dataDir);
          return current;
        },
      };
    },
  },
  {
    name: 'redis',
    async open(t) {
      // subtests run one at a time; each starts from an empty server
      await admin.flushall();
      return { stores: await redisStores(t, server.url), again: () => redisStores(t, server.url) };
    },
  },
];

for (const backend of backends) {
  t.test(backend.name, async (t) => {
    t.test('accounts: create, get, update; unknown is null', async (t) => {
      const { stores } = await backend.open(t);
      t.equal(await stores.accounts.get('acct_missing'), null, 'get of an unknown account');

      const a = account('acct_1', 'pro');
      await stores.accounts.create(a);
      await stores.accounts.create(account('acct_2'));
      t.strictSame(await stores.accounts.get('acct_1'), a);
      t.strictSame(await stores.accounts.get('acct_2'), account('acct_2'));

      const upgraded: Account = { ...a, plan: 'enterprise', limits: { perMinute: 5000, perDay: 1_000_000 } };
      t.strictSame(await stores.accounts.update(upgraded), upgraded);
      t.strictSame(await stores.accounts.get('acct_1'), upgraded);
      t.strictSame(await stores.accounts.get('acct_2'), account('acct_2'), 'other accounts are untouched');

      // update replaces: dropping `limits` drops it
      const downgraded: Account = { ...a, plan: 'business' };
      await stores.accounts.update(downgraded);
      const back = await stores.accounts.get('acct_1');
      t.strictSame(back, downgraded);
      t.notOk(back && 'limits' in back, 'no limits key after a replace without it');

      t.equal(await stores.accounts.update(account('acct_missing', 'pro')), null, 'update of an unknown account');
      t.equal(await stores.accounts.get('acct_missing'), null, 'update did not create it');
    });

    t.test('keys: create, get, findByHash, revoke (idempotent); unknown is null', async (t) => {
      const { stores } = await backend.open(t);
      const k1 = apiKey('key_1', 'acct_1');
      const k2 = apiKey('key_2', 'acct_1', 'staging');
      t.equal(await stores.keys.get('key_1'), null);
      t.equal(await stores.keys.findByHash(k1.hash), null);

      await stores.keys.create(k1);
      await stores.keys.create(k2);
      t.strictSame(await stores.keys.get('key_1'), k1);
      t.strictSame(await stores.keys.get('key_2'), k2);
      t.strictSame(await stores.keys.findByHash(k1.hash), k1);
      t.strictSame(await stores.keys.findByHash(k2.hash), k2);
      t.equal(await stores.keys.findByHash('f'.repeat(64)), null, 'unknown hash');
      t.equal(await stores.keys.get('key_missing'), null, 'unknown id');

      const revoked = { ...k1, revokedAt: REVOKED };
      t.strictSame(await stores.keys.revoke('key_1', REVOKED), revoked);
      t.strictSame(await stores.keys.revoke('key_1', LATER), revoked, 'a second revoke keeps the first time');
      t.strictSame(await stores.keys.get('key_1'), revoked);
      t.strictSame(await stores.keys.findByHash(k1.hash), revoked, 'findByHash shows revokedAt at once');
      t.strictSame(await stores.keys.findByHash(k2.hash), k2, 'other keys are untouched');
      t.equal(await stores.keys.revoke('key_missing', REVOKED), null, 'revoke of an unknown key');
      t.equal(await stores.keys.get('key_missing'), null, 'revoke did not create it');
    });

    t.test('categories: create assigns increasing ids; get and list in id order', async (t) => {
      const { stores } = await backend.open(t);
      t.strictSame(await stores.categories.list('production'), []);
      t.equal(await stores.categories.get('production', 1), null);

      const dogs = await stores.categories.create('production', { name: 'Dogs', description: 'Good ones' }, 100);
      const cats = await stores.categories.create('production', { name: 'Cats' }, 100);
      const birds = await stores.categories.create('production', { name: 'Birds', description: '' }, 100);
      if (dogs === 'full' || cats === 'full' || birds === 'full') throw new Error('unexpected full');
      t.ok(Number.isSafeInteger(dogs.id) && dogs.id > 0, `positive integer id ${dogs.id}`);
      t.ok(cats.id > dogs.id && birds.id > cats.id, `increasing ids ${dogs.id} < ${cats.id} < ${birds.id}`);
      t.strictSame(dogs, { id: dogs.id, name: 'Dogs', description: 'Good ones' });
      t.strictSame(birds, { id: birds.id, name: 'Birds', description: '' });

      t.strictSame(await stores.categories.list('production'), [dogs, cats, birds]);
      t.strictSame(await stores.categories.get('production', cats.id), cats);
      t.strictSame(await stores.categories.get('production', dogs.id), dogs);
      t.equal(await stores.categories.get('production', birds.id + 1000), null, 'unknown id');
    });

    t.test('categories: absent description stays absent', async (t) => {
      const { stores } = await backend.open(t);
      const plain = await stores.categories.create('production', { name: 'Plain' }, 10);
      if (plain === 'full') throw new Error('unexpected full');
      t.notOk('description' in plain, 'not in the created category');
      const got = await stores.categories.get('production', plain.id);
      t.strictSame(got, { id: plain.id, name: 'Plain' });
      t.notOk(got && 'description' in got, 'not in get');
      const [listed] = await stores.categories.list('production');
      t.strictSame(Object.keys(listed).sort(), ['id', 'name'], 'not in list');
    });

    t.test('categories: 100 concurrent creates get 100 distinct ids, listed in id order', async (t) => {
      const { stores } = await backend.open(t);
      const created = await Promise.all(
        Array.from({ length: 100 }, (_, i) => stores.categories.create('production', { name: `cat ${i}` }, 10_000)),
      );
      const categories = created.filter((c): c is Category => c !== 'full');
      t.equal(categories.length, 100, 'none was refused');
      const ids = categories.map((c) => c.id);
      t.equal(new Set(ids).size, 100, 'distinct ids');
      t.ok(ids.every((id) => Number.isSafeInteger(id) && id > 0), 'positive integer ids');
      // each name kept with its own id
      t.strictSame(categories.map((c) => c.name), Array.from({ length: 100 }, (_, i) => `cat ${i}`));

      const listed = await stores.categories.list('production');
      t.strictSame(listed, [...categories].sort((a, b) => a.id - b.id));
    });

    t.test('categories: list is in id order past the size where storage order differs', async (t) => {
      const { stores } = await backend.open(t);
      // Redis keeps a hash this large in hash-table order, not insertion order
      const created: Category[] = [];
      for (let batch = 0; batch < 6; batch++) {
        const some = await Promise.all(
          Array.from({ length: 50 }, (_, i) => stores.categories.create('staging', { name: `n${batch * 50 + i}` }, 10_000)),
        );
        created.push(...some.filter((c): c is Category => c !== 'full'));
      }
      t.equal(created.length, 300);
      const listed = await stores.categories.list('staging');
      t.equal(listed.length, 300);
      t.strictSame(listed.map((c) => c.id), created.map((c) => c.id).sort((a, b) => a - b));
      t.strictSame(listed, [...created].sort((a, b) => a.id - b.id));
    });

    t.test('categories: the cap gives exactly cap categories under 50 concurrent creates', async (t) => {
      const { stores } = await backend.open(t);
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => stores.categories.create('production', { name: `c${i}` }, 20)),
      );
      const created = results.filter((c): c is Category => c !== 'full');
      t.equal(created.length, 20, 'exactly 20 created');
      t.equal(results.filter((c) => c === 'full').length, 30, 'the other 30 are full');
      t.equal(new Set(created.map((c) => c.id)).size, 20);
      t.equal((await stores.categories.list('production')).length, 20);

      t.equal(await stores.categories.create('production', { name: 'one more' }, 20), 'full', 'still full');
      t.equal((await stores.categories.list('production')).length, 20, 'a full create stored nothing');
      const under = await stores.categories.create('staging', { name: 'other world' }, 20);
      t.not(under, 'full', 'the cap counts per environment');
      const raised = await stores.categories.create('production', { name: 'raised' }, 21);
      if (raised === 'full') throw new Error('refused under a raised cap');
      t.ok(raised.id > Math.max(...created.map((c) => c.id)), 'the next id is above every earlier one');
      t.equal(await stores.categories.create('production', { name: 'again' }, 21), 'full');
    });

    t.test('categories: production and staging are separate', async (t) => {
      const { stores } = await backend.open(t);
      const p1 = await stores.categories.create('production', { name: 'prod one' }, 10);
      const p2 = await stores.categories.create('production', { name: 'prod two' }, 10);
      const s1 = await stores.categories.create('staging', { name: 'staging one' }, 10);
      if (p1 === 'full' || p2 === 'full' || s1 === 'full') throw new Error('unexpected full');
      t.equal(s1.id, p1.id, 'staging ids do not advance with production ones');
      t.strictSame(await stores.categories.list('production'), [p1, p2]);
      t.strictSame(await stores.categories.list('staging'), [s1]);
      t.strictSame(await stores.categories.get('staging', s1.id), s1);
      t.strictSame(await stores.categories.get('production', p1.id), p1);
      t.equal(await stores.categories.get('staging', p2.id), null, 'production ids are not visible in staging');
    });

    t.test('projects and domains: claim, certificate state apart, routes, removal, history, durability', async (t) => {
      const { stores, again } = await backend.open(t);
      const project = { id: 'prj_1', accountId: 'acc_1', name: 'shop', upstream: 'http://127.0.0.1:9', createdAt: CREATED };
      t.equal(await stores.projects.create(project), null);
      t.equal(await stores.projects.create({ ...project, id: 'prj_2' }), 'name_taken', 'names are unique');
      t.same(await stores.projects.get('prj_1'), project);
      const domain: Domain = { hostname: 'shop.example.com', projectId: 'prj_1', accountId: 'acc_1', primary: false, status: 'pending', apex: false, records: [{ type: 'CNAME', name: 'shop', value: 'edge.localhost', ttl: 3600 }], diagnostics: [], certificate: { status: 'none' }, createdAt: CREATED };
      const claims = await Promise.all([stores.domains.create(domain), stores.domains.create({ ...domain, projectId: 'prj_x' })]);
      t.same(claims.sort(), [null, 'taken'], 'two adds of one hostname: exactly one wins');
      t.equal(await stores.domains.route('shop.example.com'), null, 'a pending domain is not routed');
      const verified = await stores.domains.update({ ...domain, status: 'verified', primary: true, verifiedAt: LATER });
      t.match(verified, { status: 'verified', primary: true, certificate: { status: 'none' } });
      await stores.domains.setCertificate('shop.example.com', { status: 'issued', issuer: 'Test CA', notAfter: LATER });
      await stores.domains.update({ ...domain, status: 'verified', primary: true, verifiedAt: LATER, certificate: { status: 'none' }, hsts: { maxAge: 60 } });
      t.match(await stores.domains.get('shop.example.com'), { hsts: { maxAge: 60 }, certificate: { status: 'issued', issuer: 'Test CA' } }, 'an owner change keeps the certificate state');
      t.same(await stores.domains.route('shop.example.com'), { projectId: 'prj_1', hsts: { maxAge: 60 } });
      t.same(stores.domains.indexedRoute('shop.example.com'), { projectId: 'prj_1', hsts: { maxAge: 60 } }, 'the routing index follows at once');
      t.equal(stores.domains.indexedRoute('other.example.com'), null);
      t.same(await stores.domains.countByStatus(), { pending: 0, verified: 1, failed: 0 });
      t.same((await stores.domains.listByProject('prj_1')).map((d) => d.hostname), ['shop.example.com']);

      const reopened = await again();
      t.match(await reopened.domains.get('shop.example.com'), { status: 'verified', records: domain.records, certificate: { status: 'issued' } }, 'all of it is durable');
      t.same(await reopened.domains.route('shop.example.com'), { projectId: 'prj_1', hsts: { maxAge: 60 } });
      t.same(reopened.domains.indexedRoute('shop.example.com'), { projectId: 'prj_1', hsts: { maxAge: 60 } }, 'the index is loaded on open');
      t.same(await reopened.domains.countByStatus(), { pending: 0, verified: 1, failed: 0 });
      t.match(await reopened.domains.remove('shop.example.com', LATER), { hostname: 'shop.example.com' });
      t.equal(await reopened.domains.get('shop.example.com'), null);
      t.equal(await reopened.domains.route('shop.example.com'), null);
      t.equal(reopened.domains.indexedRoute('shop.example.com'), null, 'a removal leaves the index at once');
      t.same(await reopened.domains.countByStatus(), { pending: 0, verified: 0, failed: 0 });
      await reopened.domains.setCertificate('shop.example.com', { status: 'issued' });
      t.equal(await reopened.domains.get('shop.example.com'), null, 'a late certificate writer does not bring it back');
      t.same(await reopened.domains.previousOwner('shop.example.com'), { accountId: 'acc_1', removedAt: LATER });
      t.equal(await reopened.domains.create(domain), null, 'it can be added again');
      t.match(await reopened.domains.get('shop.example.com'), { status: 'pending', certificate: { status: 'none' } }, 'fresh, without the old certificate state');
    });

    t.test('durability: the same state is seen again, and category ids are never reused', async (t) => {
      const opened = await backend.open(t);
      const before = opened.stores;
      await before.accounts.create(account('acct_d', 'pro'));
      const updated: Account = { ...account('acct_d', 'enterprise'), limits: { perMinute: 10, perDay: 20 } };
      await before.accounts.update(updated);
      const live = apiKey('key_live', 'acct_d');
      const gone = apiKey('key_gone', 'acct_d', 'staging');
      await before.keys.create(live);
      await before.keys.create(gone);
      await before.keys.revoke('key_gone', REVOKED);
      const production: Category[] = [];
      for (const name of ['a', 'b', 'c']) {
        const c = await before.categories.create('production', { name, description: `about ${name}` }, 100);
        if (c !== 'full') production.push(c);
      }
      const staging = await before.categories.create('staging', { name: 'bare' }, 100);
      // refused creates must not matter either
      t.equal(await before.categories.create('production', { name: 'refused' }, 3), 'full');

      const after = await opened.again();
      t.strictSame(await after.accounts.get('acct_d'), updated);
      t.strictSame(await after.keys.get('key_live'), live);
      t.strictSame(await after.keys.findByHash(live.hash), live);
      t.strictSame(await after.keys.findByHash(gone.hash), { ...gone, revokedAt: REVOKED });
      t.strictSame(await after.categories.list('production'), production);
      t.strictSame(await after.categories.list('staging'), [staging]);
      t.strictSame(await after.categories.get('production', production[1].id), production[1]);

      const next = await after.categories.create('production', { name: 'd' }, 100);
      if (next === 'full') throw new Error('unexpected full');
      t.ok(next.id > Math.max(...production.map((c) => c.id)), `next id ${next.id} is above every earlier one`);
      const nextStaging = await after.categories.create('staging', { name: 'e' }, 100);
      if (nextStaging === 'full' || staging === 'full') throw new Error('unexpected full');
      t.ok(nextStaging.id > staging.id, 'staging too');
      t.equal(await after.health(), 'ok');
    });
  });
}

t.test('embedded only', async (t) => {
  t.test('one process owns the data dir: a second open rejects with DATA_DIR_LOCKED until close', async (t) => {
    const dataDir = tempDir('state-lock');
    t.teardown(() => cleanup(dataDir));
    const first = await openEmbeddedStores(dataDir);
    let firstClosed = false;
    t.teardown(() => (firstClosed ? undefined : first.close()));
    await first.categories.create('production', { name: 'owned' }, 10);

    // Same process too: two Tables on one log would hand out the same category id twice.
    const refused = await openEmbeddedStores(dataDir).then(
      async (second) => {
        await second.close();
        return null;
      },
      (err: unknown) => err as Error & { code?: string },
    );
    t.equal(refused?.code, 'DATA_DIR_LOCKED', 'a second open in the same process is refused');

    await first.close();
    firstClosed = true;
    const second = await openEmbeddedStores(dataDir);
    t.teardown(() => second.close());
    t.strictSame((await second.categories.list('production')).map((c) => c.name), ['owned']);
  });

  t.test('another process cannot open a data dir this process holds', async (t) => {
    const dataDir = tempDir('state-lock-proc');
    t.teardown(() => cleanup(dataDir));
    const stores = await openEmbeddedStores(dataDir);
    let closed = false;
    t.teardown(() => (closed ? undefined : stores.close()));

    const module = path.resolve(import.meta.dirname, '../../src/state/embedded.ts');
    const script = `
      import { openEmbeddedStores } from ${JSON.stringify(module)};
      try { const s = await openEmbeddedStores(${JSON.stringify(dataDir)}); await s.close(); console.log('OPENED'); }
      catch (err) { console.log(err.code); }`;
    const run = () =>
      new Promise<string>((resolve, reject) => {
        const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
        let out = '';
        child.stdout.on('data', (chunk) => (out += chunk));
        child.once('error', reject);
        child.once('exit', () => resolve(out.trim()));
      });
    t.equal(await run(), 'DATA_DIR_LOCKED', 'refused while held');
    await stores.close();
    closed = true;
    t.equal(await run(), 'OPENED', 'opens once released');
  });

  t.test('a lock left by a dead process (kill -9) is taken over', async (t) => {
    const dataDir = tempDir('state-stale-lock');
    t.teardown(() => cleanup(dataDir));
    const child = spawn(process.execPath, ['-e', ''], { stdio: 'ignore' });
    await new Promise((resolve) => child.once('exit', resolve));
    writeFileSync(path.join(dataDir, 'portico.lock'), String(child.pid));
    const stores = await openEmbeddedStores(dataDir);
    t.teardown(() => stores.close());
    t.equal(await stores.health(), 'ok');
  });

  t.test('several processes starting together on a dead process\'s lock: exactly one takes it over', async (t) => {
    const module = path.resolve(import.meta.dirname, '../../src/state/embedded.ts');
    const PROCESSES = 6;
    for (let round = 0; round < 3; round++) {
      const dataDir = tempDir('state-lock-race');
      t.teardown(() => cleanup(dataDir));
      const dead = spawn(process.execPath, ['-e', ''], { stdio: 'ignore' });
      await new Promise((resolve) => dead.once('exit', resolve));
      writeFileSync(path.join(dataDir, 'portico.lock'), `${dead.pid} 0123456789abcdef`);
      // every child loads first, then all open at the same moment and hold what they got for 1.5 s
      const at = Date.now() + 2500;
      const script = `
        import { openEmbeddedStores } from ${JSON.stringify(module)};
        while (Date.now() < ${at}) {}
        try { const s = await openEmbeddedStores(${JSON.stringify(dataDir)}); console.log('OPENED'); setTimeout(() => s.close(), 1500); }
        catch (err) { console.log(err.code ?? err.message); }`;
      const outcomes = await Promise.all(Array.from({ length: PROCESSES }, () => new Promise<string>((resolve, reject) => {
        const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
        let out = '';
        child.stdout.on('data', (chunk) => (out += chunk));
        child.once('error', reject);
        child.once('exit', () => resolve(out.trim()));
      })));
      t.equal(outcomes.filter((o) => o === 'OPENED').length, 1, `round ${round + 1}: one owner (${outcomes.join(', ')})`);
      t.equal(outcomes.filter((o) => o === 'DATA_DIR_LOCKED').length, PROCESSES - 1, 'the others are refused');
      t.same(readdirSync(dataDir).filter((name) => name.startsWith('portico.lock')), [], 'no lock or moved file is left behind');
    }
  });
});

t.test('redis only', async (t) => {
  t.test('a revoke on instance A is seen at once by B, which had the key cached', async (t) => {
    await admin.flushall();
    const a = await redisStores(t, server.url);
    const b = await redisStores(t, server.url);
    const key = apiKey('key_shared', 'acct_1');
    await a.keys.create(key);
    t.strictSame(await b.keys.findByHash(key.hash), key, 'B caches the live key');
    t.strictSame(await b.keys.findByHash(key.hash), key);

    await a.keys.revoke('key_shared', REVOKED);
    const revoked = { ...key, revokedAt: REVOKED };
    t.strictSame(await eventually(() => b.keys.findByHash(key.hash), revoked), revoked);
  });

  t.test('a key created on A after B cached "unknown" for its hash becomes visible on B', async (t) => {
    await admin.flushall();
    const a = await redisStores(t, server.url);
    const b = await redisStores(t, server.url);
    const key = apiKey('key_late', 'acct_1');
    t.equal(await b.keys.findByHash(key.hash), null, 'B caches unknown');
    await a.keys.create(key);
    t.strictSame(await eventually(() => b.keys.findByHash(key.hash), key), key);
  });

  t.test('a category created on A shows in the list B had cached', async (t) => {
    await admin.flushall();
    const a = await redisStores(t, server.url);
    const b = await redisStores(t, server.url);
    t.strictSame(await b.categories.list('production'), [], 'B caches the empty list');
    const c = await a.categories.create('production', { name: 'shared' }, 10);
    t.strictSame(await eventually(() => b.categories.list('production'), [c]), [c]);
    t.strictSame(await b.categories.list('staging'), []);
  });

  t.test('cached entries live at most 60 s, even when the message was missed', async (t) => {
    await admin.flushall();
    let clock = Date.parse(CREATED);
    const b = await redisStores(t, server.url, COMMAND_TIMEOUT_MS, () => clock);
    const key = apiKey('key_ttl', 'acct_1');
    // written without a notice: B's own notice for a key it creates would also drop its copy
    await admin.set('portico:key:key_ttl', JSON.stringify(key));
    await admin.set(`portico:keyhash:${key.hash}`, 'key_ttl');
    t.strictSame(await b.keys.findByHash(key.hash), key);
    // a revoke written by something that never published (a lost pub/sub message)
    await admin.set('portico:key:key_ttl', JSON.stringify({ ...key, revokedAt: REVOKED }));
    clock += 59_000;
    t.strictSame(await b.keys.findByHash(key.hash), key, 'still cached at 59 s');
    clock += 1_001;
    t.strictSame(await b.keys.findByHash(key.hash), { ...key, revokedAt: REVOKED }, 'read again after 60 s');
  });

  t.test('with Redis killed: cached reads answer, writes reject fast; after restart writes work', async (t) => {
    const own: RedisServer = await startRedis();
    t.teardown(() => own.stop());
    const stores = await redisStores(t, own.url, 250);
    const key = apiKey('key_down', 'acct_1');
    await stores.accounts.create(account('acct_1'));
    await stores.keys.create(key);
    const cat = await stores.categories.create('production', { name: 'kept' }, 10);
    t.strictSame(await stores.keys.findByHash(key.hash), key, 'read once: cached');
    t.strictSame(await stores.categories.list('production'), [cat], 'read once: cached');

    await own.kill();
    t.strictSame(await stores.keys.findByHash(key.hash), key, 'a known key still answers');
    t.strictSame(await stores.categories.list('production'), [cat], 'a read list still answers');
    t.equal(await stores.health(), 'down');

    const writes: Array<[string, () => Promise<unknown>]> = [
      ['accounts.create', () => stores.accounts.create(account('acct_2'))],
      ['accounts.update', () => stores.accounts.update(account('acct_1', 'pro'))],
      ['keys.create', () => stores.keys.create(apiKey('key_new', 'acct_1'))],
      ['keys.revoke', () => stores.keys.revoke('key_down', REVOKED)],
      ['categories.create', () => stores.categories.create('production', { name: 'lost' }, 10)],
    ];
    for (const [name, write] of writes) {
      const started = performance.now();
      await t.rejects(write(), { code: 'STATE_UNAVAILABLE' }, `${name} rejects`);
      const took = performance.now() - started;
      t.ok(took < 1000, `${name} rejected in ${Math.round(took)} ms`);
    }

    await own.restart();
    const deadline = Date.now() + 3000;
    let last: unknown = null;
    for (;;) {
      try {
        await stores.accounts.create(account('acct_3'));
        break;
      } catch (err) {
        last = err;
        if (Date.now() > deadline) throw new Error('writes did not come back within 3 s', { cause: last });
        await sleep(100);
      }
    }
    t.strictSame(await stores.accounts.get('acct_3'), account('acct_3'));
    const after = await stores.categories.create('production', { name: 'back' }, 10);
    t.not(after, 'full');
    t.equal(await stores.health(), 'ok');
  });
});
