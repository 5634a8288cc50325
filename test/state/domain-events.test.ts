// A domain's timeline (DESIGN §6) in both backends: written with the change it describes, oldest first,
// bounded to the newest 200, durable, gone with a removed domain unless the same account adds it again.
import t, { type Test } from 'tap';
import { Redis } from 'ioredis';
import { openEmbeddedStores } from '../../src/state/embedded.ts';
import { connectRedis, openRedisStores } from '../../src/state/redis.ts';
import type { Domain, Stores } from '../../src/state/types.ts';
import { domainEvent, MAX_DOMAIN_EVENTS } from '../../src/domains/events.ts';
import { cleanup, tempDir } from '../helpers/portico.ts';
import { startRedis } from '../helpers/redis.ts';

const CREATED = '2025-03-10T08:30:00.000Z';
const LATER = '2025-03-12T10:00:00.000Z';

const server = await startRedis();
t.teardown(() => server.stop());
const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
admin.on('error', () => undefined);
t.teardown(() => admin.disconnect());

interface Opened {
  stores: Stores;
  /** the same state again: embedded reopens its data dir, Redis opens a second instance */
  again(): Promise<Stores>;
}

async function redisStores(t: Test): Promise<Stores> {
  const conns = connectRedis(server.url, 1000);
  await Promise.all([conns.client, conns.subscriber].map((c) => (c.status === 'ready' ? undefined : new Promise((r) => c.once('ready', r)))));
  const stores = await openRedisStores(conns);
  t.teardown(() => stores.close());
  return stores;
}

const backends: Array<{ name: string; open(t: Test): Promise<Opened> }> = [
  {
    name: 'embedded',
    async open(t) {
      const dataDir = tempDir('events');
      let current = await openEmbeddedStores(dataDir);
      t.teardown(async () => {
        await current.close();
        cleanup(dataDir);
      });
      return {
        stores: current,
        async again() {
          await current.close();
          current = await openEmbeddedStores(dataDir);
          return current;
        },
      };
    },
  },
  {
    name: 'redis',
    async open(t) {
      await admin.flushall();
      return { stores: await redisStores(t), again: () => redisStores(t) };
    },
  },
];

const domain: Domain = { hostname: 'shop.example.com', projectId: 'prj_1', accountId: 'acc_1', primary: false, status: 'pending', apex: false, records: [], diagnostics: [], certificate: { status: 'none' }, createdAt: CREATED };

for (const backend of backends) {
  t.test(backend.name, async (t) => {
    t.test('events are written with their change, read oldest first, and survive a restart', async (t) => {
      const { stores, again } = await backend.open(t);
      t.same(await stores.domains.events('shop.example.com'), [], 'unknown domain: no events');
      await stores.domains.appendEvent('shop.example.com', domainEvent('dns_checked', 'nothing'));
      t.same(await stores.domains.events('shop.example.com'), [], 'an event for an unknown domain is not kept');
      t.equal(await stores.domains.create(domain, domainEvent('added', 'Added.')), null);
      await stores.domains.appendEvent('shop.example.com', domainEvent('dns_checked', 'No CNAME yet.', { found: [] }));
      await stores.domains.update({ ...domain, status: 'verified' }, domainEvent('verified', 'Verified.'));
      await stores.domains.setCertificate('shop.example.com', { status: 'issued', issuer: 'Test CA' }, domainEvent('certificate_issued', 'Issued.', { issuer: 'Test CA' }));
      await stores.domains.update({ ...domain, status: 'verified', hsts: { maxAge: 60 } });
      const types = ['added', 'dns_checked', 'verified', 'certificate_issued'];
      t.same((await stores.domains.events('shop.example.com')).map((e) => e.type), types);
      const all = [...types, 'dns_checked'];
      t.match(await stores.domains.get('shop.example.com'), { status: 'verified', hsts: { maxAge: 60 }, certificate: { status: 'issued', issuer: 'Test CA' } }, 'an update after a certificate event keeps the certificate');
      t.match((await stores.domains.events('shop.example.com'))[1], { type: 'dns_checked', message: 'No CNAME yet.', details: { found: [] } });
      t.notOk('events' in (await stores.domains.get('shop.example.com'))!, 'the domain object does not carry the timeline');
      await stores.domains.update({ ...domain, status: 'verified', hsts: { maxAge: 60 }, diagnostics: [{ code: 'cname_mismatch', message: 'found ,"events":[ here' }] }, domainEvent('dns_checked', 'a message with ,"events":[ inside'));
      t.match(await stores.domains.get('shop.example.com'), { diagnostics: [{ message: 'found ,"events":[ here' }], certificate: { status: 'issued' } }, 'text that looks like the timeline key does not confuse a read');
      t.equal((await stores.domains.events('shop.example.com')).at(-1)?.message, 'a message with ,"events":[ inside');
      const reopened = await again();
      t.same((await reopened.domains.events('shop.example.com')).map((e) => e.type), all, 'durable');
      t.match(await reopened.domains.get('shop.example.com'), { certificate: { status: 'issued' } });
    });

    t.test('a step stamped earlier but stored later is still read in time order', async (t) => {
      const { stores } = await backend.open(t);
      const at = Date.parse(CREATED);
      await stores.domains.create({ ...domain, hostname: 'order.example.com' }, domainEvent('added', 'Added.', undefined, at));
      // an order placed (stamped first) is written after a DNS check that began later
      await stores.domains.appendEvent('order.example.com', domainEvent('dns_checked', 'Checked.', undefined, at + 30));
      await stores.domains.appendEvent('order.example.com', domainEvent('order_placed', 'Ordered.', undefined, at + 10));
      await stores.domains.appendEvent('order.example.com', domainEvent('challenge_served', 'Served.', undefined, at + 30));
      t.same((await stores.domains.events('order.example.com')).map((e) => e.type), ['added', 'order_placed', 'dns_checked', 'challenge_served'], 'oldest first; one moment keeps the written order');
    });

    t.test(`only the newest ${MAX_DOMAIN_EVENTS} are kept; concurrent writers lose nothing`, async (t) => {
      const { stores } = await backend.open(t);
      await stores.domains.create(domain, domainEvent('added', 'Added.'));
      const writes: Array<Promise<unknown>> = [];
      for (let i = 0; i < MAX_DOMAIN_EVENTS + 20; i++) {
        writes.push(i % 3 === 0
          ? stores.domains.update({ ...domain, diagnostics: [{ code: 'cname_missing', message: String(i) }] }, domainEvent('dns_checked', `check ${i}`))
          : i % 3 === 1
            ? stores.domains.setCertificate(domain.hostname, { status: 'pending' }, domainEvent('order_placed', `order ${i}`))
            : stores.domains.appendEvent(domain.hostname, domainEvent('challenge_served', `challenge ${i}`)));
      }
      await Promise.all(writes);
      const events = await stores.domains.events(domain.hostname);
      t.equal(events.length, MAX_DOMAIN_EVENTS);
      const numbers = events.map((e) => Number(e.message.split(' ')[1])).sort((a, b) => a - b);
      t.same(numbers, Array.from({ length: MAX_DOMAIN_EVENTS }, (_, i) => i + 20), 'the newest ones, none lost to a concurrent write');
    });

    t.test('removal: the timeline ends with "removed"; the same account continues it, another starts afresh', async (t) => {
      const { stores } = await backend.open(t);
      await stores.domains.create(domain, domainEvent('added', 'Added.'));
      await stores.domains.remove(domain.hostname, LATER, domainEvent('removed', 'Removed.'));
      t.same(await stores.domains.events(domain.hostname), [], 'a removed domain shows no timeline');
      await stores.domains.create(domain, domainEvent('added', 'Added again.'));
      t.same((await stores.domains.events(domain.hostname)).map((e) => e.type), ['added', 'removed', 'added']);
      await stores.domains.remove(domain.hostname, LATER, domainEvent('removed', 'Removed.'));
      await stores.domains.create({ ...domain, accountId: 'acc_2', projectId: 'prj_2' }, domainEvent('added', 'Added by another.'));
      t.same((await stores.domains.events(domain.hostname)).map((e) => e.message), ['Added by another.'], 'another account does not see the earlier owner\'s timeline');
      t.same(await stores.domains.previousOwner(domain.hostname), { accountId: 'acc_1', removedAt: LATER });
    });

    t.test('the previous owner: a removed claim that never proved ownership does not replace the owner it was asked to prove against', async (t) => {
      const { stores } = await backend.open(t);
      const EARLIER = '2025-03-11T09:00:00.000Z';
      await stores.domains.create({ ...domain, status: 'verified', verifiedAt: CREATED }, domainEvent('added', 'Added.'));
      await stores.domains.remove(domain.hostname, EARLIER);
      t.same(await stores.domains.previousOwner(domain.hostname), { accountId: 'acc_1', removedAt: EARLIER });
      // another account adds it, is asked for the TXT record, and removes it unproven
      const claim = { ...domain, accountId: 'acc_2', projectId: 'prj_2', ownershipToken: 'portico-verify=0123' };
      await stores.domains.create(claim, domainEvent('added', 'Added by another.'));
      await stores.domains.remove(domain.hostname, LATER);
      t.same(await stores.domains.previousOwner(domain.hostname), { accountId: 'acc_1', removedAt: EARLIER }, 'still the first owner: a re-add must prove ownership again');
      // proven this time: it is the owner now
      await stores.domains.create({ ...claim, status: 'verified', verifiedAt: LATER }, domainEvent('added', 'Added again.'));
      await stores.domains.remove(domain.hostname, LATER);
      t.same(await stores.domains.previousOwner(domain.hostname), { accountId: 'acc_2', removedAt: LATER });
    });

    t.test('removals at the same moment: one removes it, the others find nothing; the timeline is kept once', async (t) => {
      const { stores } = await backend.open(t);
      await stores.domains.create(domain, domainEvent('added', 'Added.'));
      await stores.domains.appendEvent(domain.hostname, domainEvent('dns_checked', 'Checked.'));
      const results = await Promise.all(Array.from({ length: 10 }, () => stores.domains.remove(domain.hostname, LATER, domainEvent('removed', 'Removed.'))));
      t.equal(results.filter((r) => r !== null).length, 1, 'one removal finds the domain');
      t.equal(await stores.domains.get(domain.hostname), null);
      await stores.domains.create(domain, domainEvent('added', 'Added again.'));
      t.same((await stores.domains.events(domain.hostname)).map((e) => e.type), ['added', 'dns_checked', 'removed', 'added'], 'the earlier timeline continues, with one "removed"');
    });
  });
}
