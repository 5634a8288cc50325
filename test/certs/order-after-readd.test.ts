// An order placed before a domain's removal keeps nothing for the same name added back (DESIGN §6):
// the domain is removed while the CA validates, then added back and verified at once. When the CA
// answers, the old order's certificate is dropped as for a removal, its steps stay off the new
// domain's timeline, and the new domain gets its own order without anyone asking again — on one
// instance, and when another instance holds the old order while the name is added back. Real pebble
// (validation answered 1.5 s late) and challtestsrv; removal and verification are what the registry
// and the DNS check do (the record goes, then onRemoved; the record is verified, then onVerified).
import t, { type Test } from 'tap';
import type { DomainEvent } from '../../src/domains/events.ts';
import { startManagerBed, type ManagerBed } from '../helpers/cert-manager.ts';

const hostname = 'back.example.org';
const ORDER_STEPS = new Set(['order_placed', 'challenge_served', 'certificate_issued', 'order_failed']);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until<T>(what: string, probe: () => Promise<T | null | false>, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const found = await probe();
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

const orderSteps = (events: DomainEvent[]) => events.filter((e) => ORDER_STEPS.has(e.type)).map((e) => e.type);

/** The first order is with the CA (its order_placed written); the domain is removed and added back, verified. */
async function removeAndAddBack(t: Test, bed: ManagerBed, removing: ManagerBed['manager']) {
  await until('the first order to be placed', async () => (await bed.stores.domains.events(hostname)).some((e) => e.type === 'order_placed'));
  t.equal(bed.pebble.orders(), 1, 'the first order was placed');
  t.ok(await bed.stores.domains.remove(hostname, new Date(bed.clock.ms).toISOString()), 'removed');
  await removing.onRemoved(hostname);
  bed.clock.ms += 1_000;
  await bed.addVerified(hostname);
  const readded = (await bed.stores.domains.get(hostname))!;
  return { readded, since: (await bed.stores.domains.events(hostname)).length };
}

async function checkNewDomainsOwn(t: Test, bed: ManagerBed, since: number) {
  const issued = await until('the domain added back to have a certificate', async () => {
    const domain = await bed.stores.domains.get(hostname);
    return domain?.certificate.status === 'issued' ? domain : null;
  });
  const events = await bed.stores.domains.events(hostname);
  // the CA may reuse the authorisation the old order made valid (pebble does in 1 % of orders even
  // with PEBBLE_AUTHZREUSE=0: its test is rand.Intn(100) > percent), and then nothing is served; a
  // step of the old order would come before this order's order_placed
  const steps = orderSteps(events.slice(since));
  const ownOrder = steps.includes('challenge_served') ? ['order_placed', 'challenge_served', 'certificate_issued'] : ['order_placed', 'certificate_issued'];
  t.same(steps, ownOrder, 'the timeline since the name came back shows its own order only');
  t.equal(bed.pebble.orders(), 2, 'the domain added back placed an order of its own');
  const stored = await bed.certs.certificates.get(hostname);
  t.ok(stored, 'its certificate is stored');
  t.equal(stored?.notAfter, issued.certificate.notAfter, 'the stored certificate is the one its state names');
}

t.test('one instance: the old order keeps nothing, the domain added back gets its own certificate', async (t) => {
  const bed = await startManagerBed({ challengeDelayMs: 1_500 });
  t.teardown(() => bed.stop());
  await bed.addVerified(hostname);
  const first = bed.manager.obtain(hostname, 'verified');
  const { readded, since } = await removeAndAddBack(t, bed, bed.manager);
  bed.manager.onVerified(readded, 'verify');
  await first;
  await checkNewDomainsOwn(t, bed, since);
});

t.test('two instances: the one holding the old order drops it and orders for the domain added back', async (t) => {
  const bed = await startManagerBed({ challengeDelayMs: 1_500 });
  t.teardown(() => bed.stop());
  const other = bed.another();
  await bed.addVerified(hostname);
  const first = bed.manager.obtain(hostname, 'verified');
  const { readded, since } = await removeAndAddBack(t, bed, other);
  // verified on the other instance: it waits for the order lock's holder
  const waited = other.obtain(hostname, 'verified');
  other.onVerified(readded, 'verify');
  await first;
  await checkNewDomainsOwn(t, bed, since);
  t.equal((await waited)?.certPem, (await bed.certs.certificates.get(hostname))?.certPem, 'the other instance got the new domain\'s certificate');
});
