// No CA sees a validation that must fail (DESIGN §6): while a domain's DNS points elsewhere (health
// misconfigured) no order is placed for it by any trigger — its cert-retry job, a handshake, the
// renewal sweep — with or without a valid certificate, and a Re-verify whose DNS check fails orders
// nothing. Orders resume once the domain is healthy again. Real pebble and challtestsrv, whose
// pebble.orders() counts what the CA was sent.
import t from 'tap';
import { createScheduler } from '../../src/domains/scheduler.ts';
import { createDomainChecks } from '../../src/domains/rechecks.ts';
import { systemResolver } from '../../src/domains/verifier.ts';
import { createLogger } from '../../src/log.ts';
import { startManagerBed } from '../helpers/cert-manager.ts';

const setHealth = async (bed: Awaited<ReturnType<typeof startManagerBed>>, hostname: string, health: 'ok' | 'misconfigured') =>
  bed.stores.domains.update({ ...(await bed.stores.domains.get(hostname))!, health });

t.test('no first certificate, misconfigured: neither the retry job nor a handshake orders; healthy again, the retry job does', async (t) => {
  const bed = await startManagerBed();
  t.teardown(() => bed.stop());
  const { manager, stores, pebble, dns, clock } = bed;
  const scheduler = createScheduler({ store: stores.schedule, log: createLogger('silent'), now: () => clock.ms });
  manager.useScheduler(scheduler);
  await bed.addVerified('moved.example.org');
  // its DNS moved away at once: the first order fails and a cert-retry job is due after the backoff
  await dns.clearA('moved.example.org');
  await dns.addA('moved.example.org', ['127.0.0.2']);
  await manager.obtain('moved.example.org', 'verified');
  await manager.idle();
  t.equal(pebble.orders(), 1);
  t.match((await stores.domains.get('moved.example.org'))!.certificate, { status: 'failed' });
  await setHealth(bed, 'moved.example.org', 'misconfigured');
  clock.ms += 10 * 60_000;
  await scheduler.runDue();
  t.equal(pebble.orders(), 1, 'the retry job sends the CA nothing');
  t.equal(await manager.secureContext('moved.example.org'), null, 'a handshake gets the fallback');
  t.equal(pebble.orders(), 1, 'and sends the CA nothing either');

  await dns.clearA('moved.example.org');
  await dns.addA('moved.example.org', ['127.0.0.1']);
  await setHealth(bed, 'moved.example.org', 'ok');
  clock.ms += 61 * 60_000;
  await scheduler.runDue();
  await manager.idle();
  t.equal(pebble.orders(), 2, 'healthy again: the retry job orders');
  t.equal((await stores.domains.get('moved.example.org'))!.certificate.status, 'issued');
});

t.test('expired while misconfigured: a handshake and the sweep order nothing; healthy again, it is renewed', async (t) => {
  const bed = await startManagerBed();
  t.teardown(() => bed.stop());
  const { manager, certs, pebble, clock } = bed;
  await bed.addVerified('lapsed.example.org');
  const first = (await manager.obtain('lapsed.example.org', 'verified'))!;
  await manager.idle();
  manager.stop();
  await setHealth(bed, 'lapsed.example.org', 'misconfigured');
  const orders = pebble.orders();
  clock.ms = Date.parse(first.notAfter) + 60_000;
  t.equal(await manager.secureContext('lapsed.example.org'), null, 'expired: the fallback');
  await manager.sweep();
  await manager.idle();
  t.equal(pebble.orders(), orders, 'no order while misconfigured');

  await setHealth(bed, 'lapsed.example.org', 'ok');
  await manager.sweep();
  await manager.idle();
  t.equal(pebble.orders(), orders + 1, 'healthy again: renewed');
  t.not((await certs.certificates.get('lapsed.example.org'))!.certPem, first.certPem);
});

t.test('Re-verify whose DNS check fails orders nothing; one that passes orders', async (t) => {
  const bed = await startManagerBed();
  t.teardown(() => bed.stop());
  const { manager, stores, pebble, dns } = bed;
  const log = createLogger('silent');
  const scheduler = createScheduler({ store: stores.schedule, log });
  await dns.addA('edge.localhost', ['127.0.0.1']);
  await dns.addA('elsewhere.example.net', ['127.0.0.2']);
  const resolver = systemResolver([dns.dnsServer]);
  const checks = createDomainChecks({
    stores, scheduler, log, metrics: bed.metrics,
    onVerified: (domain, reason) => manager.onVerified(domain, reason),
    context: () => ({ pendingRecheckMs: 60_000, verifiedRecheckMs: 86_400_000, cnameTarget: 'edge.localhost', caaIdentities: ['pebble.letsencrypt.org'], resolver }),
  });
  await bed.addVerified('again.example.org');
  await dns.clearA('again.example.org');
  await dns.setCname('again.example.org', 'elsewhere.example.net');
  const checked = (await checks.run((await stores.domains.get('again.example.org'))!, 'reverify'))!;
  t.match(checked.diagnostics, [{ code: 'cname_mismatch' }], 'the check found the CNAME elsewhere');
  await new Promise((r) => setTimeout(r, 1_500));
  t.equal(pebble.orders(), 0, 'no order');
  t.notOk((await stores.domains.events('again.example.org')).some((e) => e.type === 'order_placed'), 'no order on the timeline');

  await dns.clearCname('again.example.org');
  await dns.setCname('again.example.org', 'edge.localhost');
  await checks.run((await stores.domains.get('again.example.org'))!, 'reverify');
  const deadline = Date.now() + 10_000;
  while ((await stores.domains.get('again.example.org'))!.certificate.status !== 'issued' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  t.equal(pebble.orders(), 1, 'a passing Re-verify orders');
  t.equal((await stores.domains.get('again.example.org'))!.certificate.status, 'issued');
});
