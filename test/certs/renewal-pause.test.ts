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

  await stores.domains.update({ ...(await stores.domains.get('paused.example.org'))!, health: 'ok' });
  await manager.sweep();
  t.equal(pebble.orders(), orders + 1, 'healthy again: renewed');
  t.not((await certs.certificates.get('paused.example.org'))!.certPem, first.certPem);
});
