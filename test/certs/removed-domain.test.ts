// A removed domain keeps nothing of its certificate work (DESIGN §6): an order already with the CA
// when the owner removes the domain stores nothing and plans no renewal, and a domain waiting in the
// order queue leaves it, so the places behind it and the queue depth move up. Real pebble and
// challtestsrv; the removal is what the registry does (the record goes, then onRemoved).
import t from 'tap';
import { createScheduler } from '../../src/domains/scheduler.ts';
import { createLogger } from '../../src/log.ts';
import { startManagerBed } from '../helpers/cert-manager.ts';

const removeDomain = async (bed: Awaited<ReturnType<typeof startManagerBed>>, hostname: string) => {
  t.ok(await bed.stores.domains.remove(hostname, new Date(bed.clock.ms).toISOString()), `${hostname} removed`);
  await bed.manager.onRemoved(hostname);
};

t.test('removed while the CA validates: the certificate is dropped, no renewal is planned', async (t) => {
  const bed = await startManagerBed({ challengeDelayMs: 1_500 });
  t.teardown(() => bed.stop());
  const { manager, stores, certs, pebble, clock } = bed;
  const scheduler = createScheduler({ store: stores.schedule, log: createLogger('silent'), now: () => clock.ms });
  manager.useScheduler(scheduler);
  await bed.addVerified('gone.example.org');
  const ordering = manager.obtain('gone.example.org', 'verified');
  // the order is with the CA, its validation waiting on the slow challenge answer
  const deadline = Date.now() + 5_000;
  while (pebble.orders() === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  t.equal(pebble.orders(), 1, 'the order was placed');
  await removeDomain(bed, 'gone.example.org');
  t.equal(await ordering, null, 'the order ends with no certificate');
  await manager.idle();
  t.equal(await certs.certificates.get('gone.example.org'), null, 'nothing stored for the removed domain');
  const jobs = await stores.schedule.claim(clock.ms + 1e12, 100, 1);
  t.same(jobs.filter((j) => j.key === 'gone.example.org'), [], 'no renewal or retry job left');
});

t.test('removed while queued: out of the queue, the others move up', async (t) => {
  const bed = await startManagerBed({ limits: { newOrdersPer3h: 1 } });
  t.teardown(() => bed.stop());
  const { manager, stores, metrics, pebble, clock } = bed;
  const hostnames = ['q1', 'q2', 'q3'].map((label) => `${label}.example.org`);
  for (const hostname of hostnames) {
    await bed.addVerified(hostname);
    clock.ms += 1000;
    await manager.obtain(hostname, 'verified');
  }
  await new Promise((r) => setTimeout(r, 100));
  manager.stop();
  await manager.idle();
  t.equal(pebble.orders(), 1);
  t.equal((await stores.domains.get('q3.example.org'))!.certificate.queuePosition, 2);
  await removeDomain(bed, 'q2.example.org');
  t.equal((await stores.domains.get('q3.example.org'))!.certificate.queuePosition, 1, 'the one behind moves up');
  const depth = (await metrics.registry.getSingleMetric('portico_acme_queue_depth')!.get()).values[0].value;
  t.equal(depth, 1, 'the queue depth counts only who still waits');
  clock.ms += 3 * 3_600_000;
  await manager.sweep();
  t.equal(pebble.orders(), 2, 'the next order is for the one still waiting');
  t.equal((await stores.domains.get('q3.example.org'))!.certificate.status, 'issued');
});
