// The store contract (DESIGN §8): the cases every backend must pass — embedded, one Redis,
// Sentinel and Cluster (contract.test.ts, contract-sentinel.test.ts, contract-cluster.test.ts).
import t, { type Test } from 'tap';
import { createHash } from 'node:crypto';
import type { Account, ApiKey, Category, Domain, Stores } from '../../src/state/types.ts';

export const CREATED = '2025-03-10T08:30:00.000Z';
export const REVOKED = '2025-03-11T09:00:00.000Z';
export const LATER = '2025-03-12T10:00:00.000Z';

export function account(id: string, plan: Account['plan'] = 'free'): Account {
  return { id, plan, createdAt: CREATED };
}

export function apiKey(id: string, accountId: string, environment: ApiKey['environment'] = 'production'): ApiKey {
  return { id, accountId, environment, hash: createHash('sha256').update(id).digest('hex'), createdAt: CREATED };
}

export interface Opened {
  stores: Stores;
  /**
   * The same state seen again: embedded closes the store and reopens its data dir (a restart);
   * Redis opens a second instance on the same server.
   */
  again(): Promise<Stores>;
}

export interface Backend {
  name: string;
  /** a store with no data in it, closed in teardown */
  open(t: Test): Promise<Opened>;
}

/** Runs every shared case against `backend`. */
export function contract(backend: Backend): void {
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

    t.test('categories: createOnce — an idempotency key makes one category, per account and environment, and outlives a restart', async (t) => {
      const { stores, again } = await backend.open(t);
      const once = { accountId: 'acct_1', key: 'order-7f3c' };
      const first = await stores.categories.createOnce('production', { name: 'Dogs', description: 'Good ones' }, 100, once);
      t.match(first, { id: Number, name: 'Dogs', description: 'Good ones' }, 'the first use creates');
      const dogs = first as Category;
      t.same(await stores.categories.createOnce('production', { name: 'Dogs', description: 'Good ones' }, 100, once), { replayed: dogs }, 'the same request again: that category, replayed');
      t.equal(await stores.categories.createOnce('production', { name: 'Cats' }, 100, once), 'key_reused', 'the key with other fields is refused');
      t.equal(await stores.categories.createOnce('production', { name: 'Dogs' }, 100, once), 'key_reused', 'a missing optional field is other fields too');
      t.same(await stores.categories.list('production'), [dogs], 'one category');

      // the key is the account's: another account's, or the same account's in the other environment, is another key
      const other = await stores.categories.createOnce('production', { name: 'Dogs', description: 'Good ones' }, 100, { accountId: 'acct_2', key: once.key });
      t.not((other as Category).id, dogs.id, 'another account\'s key makes its own');
      const staging = await stores.categories.createOnce('staging', { name: 'Dogs', description: 'Good ones' }, 100, once);
      t.match(staging, { id: Number, name: 'Dogs' }, 'the other environment makes its own');
      t.notOk('replayed' in (staging as object));

      // 20 at once under one new key: one category, the others get it back
      const racing = { accountId: 'acct_1', key: 'race' };
      const raced = await Promise.all(Array.from({ length: 20 }, () => stores.categories.createOnce('production', { name: 'Birds' }, 100, racing)));
      const made = raced.filter((r): r is Category => typeof r === 'object' && !('replayed' in r));
      t.equal(made.length, 1, 'one create');
      t.ok(raced.every((r) => typeof r === 'object' && ('replayed' in r ? r.replayed.id : r.id) === made[0].id), 'every answer names that category');
      t.equal((await stores.categories.list('production')).filter((c) => c.name === 'Birds').length, 1);

      // full: nothing is remembered, so the key works once there is room (here: a higher cap)
      const full = { accountId: 'acct_1', key: 'full' };
      t.equal(await stores.categories.createOnce('production', { name: 'Fish' }, 1, full), 'full');
      t.match(await stores.categories.createOnce('production', { name: 'Other fish' }, 100, full), { name: 'Other fish' }, 'a key that made nothing is free');

      const reopened = await again();
      t.same(await reopened.categories.createOnce('production', { name: 'Dogs', description: 'Good ones' }, 100, once), { replayed: dogs }, 'remembered durably');
      t.equal(await reopened.categories.createOnce('production', { name: 'Cats' }, 100, once), 'key_reused');
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
      t.same(await stores.domains.statusesByProject('prj_1'), [{ hostname: 'shop.example.com', status: 'verified' }], 'statuses from the index');
      t.same(await stores.domains.statusesByProject('prj_none'), []);

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
      t.same(await reopened.domains.statusesByProject('prj_1'), [], 'a removed domain has no status');
      await reopened.domains.setCertificate('shop.example.com', { status: 'issued' });
      t.equal(await reopened.domains.get('shop.example.com'), null, 'a late certificate writer does not bring it back');
      t.same(await reopened.domains.previousOwner('shop.example.com'), { accountId: 'acc_1', removedAt: LATER });
      t.equal(await reopened.domains.create(domain), null, 'it can be added again');
      t.match(await reopened.domains.get('shop.example.com'), { status: 'pending', certificate: { status: 'none' } }, 'fresh, without the old certificate state');

      // removed and added back again (another createdAt): a writer for the domain that was there
      // before (an order that ran across the removal) changes nothing on the new one, in one step
      t.ok(await reopened.domains.remove('shop.example.com', LATER), 'removed once more');
      t.equal(await reopened.domains.create({ ...domain, createdAt: LATER }), null, 'and added back: a new domain');
      const step = (message: string) => ({ at: LATER, type: 'certificate_issued' as const, message });
      await reopened.domains.setCertificate('shop.example.com', { status: 'issued', issuer: 'Old CA' }, step('old order, with its step'), CREATED);
      await reopened.domains.setCertificate('shop.example.com', { status: 'failed', lastError: 'old order' }, undefined, CREATED);
      await reopened.domains.appendEvent('shop.example.com', step('old order, its step alone'), CREATED);
      t.match(await reopened.domains.get('shop.example.com'), { createdAt: LATER, certificate: { status: 'none' } }, "the old domain's writers leave the new one's certificate state");
      t.notOk((await reopened.domains.events('shop.example.com')).some((e) => e.message.startsWith('old order')), "nor anything on its timeline");
      await reopened.domains.setCertificate('shop.example.com', { status: 'pending' }, undefined, LATER);
      t.match(await reopened.domains.get('shop.example.com'), { certificate: { status: 'pending' } }, "the new domain's own writer (no step)");
      await reopened.domains.setCertificate('shop.example.com', { status: 'issued', issuer: 'New CA' }, step('new order'), LATER);
      await reopened.domains.appendEvent('shop.example.com', step('new step'), LATER);
      t.match(await reopened.domains.get('shop.example.com'), { certificate: { status: 'issued', issuer: 'New CA' } }, "its own writer (with a step)");
      t.same((await reopened.domains.events('shop.example.com')).filter((e) => e.message.startsWith('new')).map((e) => e.message), ['new order', 'new step'], 'its own steps');
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
