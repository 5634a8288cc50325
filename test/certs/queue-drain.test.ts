// The queue is worked through as the budget refills, first verified first, with an injected clock
// (a refill takes an hour at 3 orders per 3 h) and a real pebble counting the orders; a hostname over
// its failed-validation limit waits without holding back the others.
import t from 'tap';
import { startManagerBed } from '../helpers/cert-manager.ts';

t.test('over the limit: queued in verification order, ordered one by one as the bucket refills', async (t) => {
  const bed = await startManagerBed({ limits: { newOrdersPer3h: 3 } });
  t.teardown(() => bed.stop());
  const { manager, stores, pebble, clock } = bed;
  const hostnames = ['d1', 'd2', 'd3', 'd4', 'd5'].map((label) => `${label}.example.org`);
  for (const hostname of hostnames) {
    await bed.addVerified(hostname);
    clock.ms += 1000;
    await manager.obtain(hostname, 'verified');
  }
  const state = async () => Promise.all(hostnames.map(async (h) => (await stores.domains.get(h))!.certificate));
  t.equal(pebble.orders(), 3);
  t.same((await state()).map((c) => c.status), ['issued', 'issued', 'issued', 'queued', 'queued']);
  t.same((await state()).slice(3).map((c) => c.queuePosition), [1, 2]);

  t.equal(await manager.secureContext('d5.example.org'), null, 'a handshake for a queued name gets the fallback');
  t.equal(pebble.orders(), 3, 'and does not jump the queue');
  // joining behind the others woke the queue's own timer (a real one): let that look end, and stop the
  // timers before the clock moves, so no look reads the clock before a jump and holds the queue's lock
  // through a sweep (the sweeps below are the looks)
  await new Promise((r) => setTimeout(r, 100));
  manager.stop();
  await manager.idle();

  clock.ms += 30 * 60_000;
  await manager.sweep();
  t.equal(pebble.orders(), 3, 'half an hour later: nothing refilled yet');
  clock.ms += 31 * 60_000;
  await manager.sweep();
  t.equal(pebble.orders(), 4, 'an hour later: one order');
  t.same((await state()).map((c) => c.status), ['issued', 'issued', 'issued', 'issued', 'queued'], 'for the first in line');
  t.equal((await state())[4].queuePosition, 1, 'the next moves up');
  clock.ms += 61 * 60_000;
  await manager.sweep();
  t.equal(pebble.orders(), 5);
  t.equal((await state())[4].status, 'issued');
  await manager.idle();
  const events = (await stores.domains.events('d5.example.org')).map((e) => e.type);
  t.same(events.filter((type) => type !== 'challenge_served'), ['certificate_queued', 'order_placed', 'certificate_issued', 'renewal_scheduled'], 'queued, then ordered, then issued');
});

t.test('failed validations per hostname: after the limit, that hostname waits; others still order', async (t) => {
  const bed = await startManagerBed({ limits: { failedValidationsPerHour: 1 } });
  t.teardown(() => bed.stop());
  const { manager, stores, pebble, dns, clock } = bed;
  await bed.addVerified('broken.example.org');
  // the CA's validation lands where nothing answers
  await dns.clearA('broken.example.org');
  await dns.addA('broken.example.org', ['127.0.0.2']);
  await manager.obtain('broken.example.org', 'verified');
  t.equal(pebble.orders(), 1);
  t.match((await stores.domains.get('broken.example.org'))!.certificate, { status: 'failed', lastError: /^challenge: / });
  await manager.obtain('broken.example.org', 'retry');
  t.equal(pebble.orders(), 1, 'a second try within the hour is not sent to the CA');
  const waiting = (await stores.domains.get('broken.example.org'))!.certificate;
  t.match(waiting, { status: 'queued', queuePosition: 1 });
  t.match((await stores.domains.events('broken.example.org')).find((e) => e.type === 'certificate_queued')?.message, /failed validations for this hostname/);
  await bed.addVerified('fine.example.org');
  await manager.obtain('fine.example.org', 'verified');
  // it joins the line behind broken.example.org, whose wait holds back only itself: the queue's
  // timer (a real one) lets it go at once
  await new Promise((r) => setTimeout(r, 100));
  await manager.idle();
  t.equal((await stores.domains.get('fine.example.org'))!.certificate.status, 'issued', 'another hostname is not held back');
  t.equal(pebble.orders(), 2);
  t.equal((await stores.domains.get('broken.example.org'))!.certificate.queuePosition, 1);
  // from here the sweep is the look: no timer's look may hold the queue's lock across the clock's jump
  manager.stop();
  await manager.idle();
  clock.ms += 61 * 60_000;
  await dns.clearA('broken.example.org');
  await dns.addA('broken.example.org', ['127.0.0.1']);
  await manager.sweep();
  t.equal((await stores.domains.get('broken.example.org'))!.certificate.status, 'issued', 'an hour later, with its DNS fixed, it is ordered from the queue');
});

t.test('a renewal over the limit waits in line while the current certificate keeps being served', async (t) => {
  const bed = await startManagerBed({ limits: { newOrdersPer3h: 1 } });
  t.teardown(() => bed.stop());
  const { manager, stores, certs, pebble, clock } = bed;
  await bed.addVerified('old.example.org');
  const first = (await manager.obtain('old.example.org', 'verified'))!;
  await manager.idle();
  // well inside its renewal window, another domain takes the one order there is
  clock.ms = Date.parse(first.notBefore) + (Date.parse(first.notAfter) - Date.parse(first.notBefore)) * 0.8;
  await bed.addVerified('new.example.org');
  t.ok(await manager.obtain('new.example.org', 'verified'));
  await manager.sweep();
  await manager.idle();
  t.equal(pebble.orders(), 2, 'the renewal was not sent to the CA');
  t.match((await stores.domains.get('old.example.org'))!.certificate, { status: 'issued', queuePosition: 1, notAfter: first.notAfter }, 'issued, and waiting in line for its renewal');
  t.ok(await manager.secureContext('old.example.org'), 'the current certificate is still served');
  // the queue's own look runs on a real-time timer: one that fires around the clock's jump reads the
  // clock before it moved and holds the queue's lock, so the sweep's drain skips. Stop the timers (the
  // sweep below is the look) and let a look already running end.
  manager.stop();
  await manager.idle();
  clock.ms += 3 * 3_600_000;
  await manager.sweep();
  await manager.idle();
  t.equal(pebble.orders(), 3, 'once the budget refilled: renewed');
  t.not((await certs.certificates.get('old.example.org'))!.certPem, first.certPem);
  t.equal((await stores.domains.get('old.example.org'))!.certificate.queuePosition, undefined, 'and out of the line');
});
