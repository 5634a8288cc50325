// Renewal orders pause while a domain is misconfigured (its DNS points elsewhere: the CA's validation
// would fail and count against the failed-validation limit), and resume once it is healthy again.
import t from 'tap';
import { startManagerBed } from '../helpers/cert-manager.ts';

t.test('a misconfigured domain keeps its certificate and sends the CA nothing until it recovers', async (t) => {
  const bed = await startManagerBed();
  t.teardown(() => bed.stop());
  const { manager, stores, certs, pebble, clock } = bed;
  await bed.addVerified('paused.example.org');
  const first = (await manager.obtain('paused.example.org', 'verified'))!;
  t.ok(first);
  const domain = (await stores.domains.get('paused.example.org'))!;
  await stores.domains.update({ ...domain, health: 'misconfigured' });
  const orders = pebble.orders();
  const start = Date.parse(first.notBefore);
  clock.ms = start + (Date.parse(first.notAfter) - start) * 0.8;
  await manager.sweep();
  await manager.idle();
  t.equal(pebble.orders(), orders, 'inside the renewal window, misconfigured: no order');
  t.equal((await certs.certificates.get('paused.example.org'))!.certPem, first.certPem, 'the certificate it has is kept');
  t.ok(await manager.secureContext('paused.example.org'), 'and served');
  const paused = async () => (await stores.domains.events('paused.example.org')).filter((e) => e.details?.renewal === 'paused');
  t.match(await paused(), [{ type: 'misconfigured', message: new RegExp(`renewal is due but is not ordered .* expires on ${first.notAfter}`), details: { notAfter: first.notAfter } }], 'the timeline says the due renewal waits, and until when the certificate lasts');
  clock.ms += 3_600_000;
  await manager.sweep();
  await manager.idle();
  t.equal((await paused()).length, 1, 'said once, not at every hourly look');
  t.equal(pebble.orders(), orders, 'still no order');

  await stores.domains.update({ ...(await stores.domains.get('paused.example.org'))!, health: 'ok' });
  await manager.sweep();
  t.equal(pebble.orders(), orders + 1, 'healthy again: renewed');
  t.not((await certs.certificates.get('paused.example.org'))!.certPem, first.certPem);
  t.notOk('renewalPausedAt' in (await stores.domains.get('paused.example.org'))!.certificate, 'the pause is forgotten once renewed');
});
