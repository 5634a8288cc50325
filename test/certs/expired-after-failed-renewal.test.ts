// Regression: a failed renewal keeps the domain's certificate `issued` with its backoff in
// nextAttemptAt, but only a `failed` status held handshakes to the backoff. Once the certificate
// expired, the first handshake ordered at once, outside the backoff (and so did every handshake after
// each further failure). Now a handshake waits for the backoff's end like every other path; the
// renewal's own job tries again then. Real pebble, injected clock.
import t from 'tap';
import { startManagerBed } from '../helpers/cert-manager.ts';

t.test('expired after a failed renewal: no order on a handshake before the backoff ends', async (t) => {
  const bed = await startManagerBed();
  t.teardown(() => bed.stop());
  const { manager, stores, pebble, dns, clock } = bed;
  const hostname = 'lapse.example.org';
  await bed.addVerified(hostname);
  const first = (await manager.obtain(hostname, 'verified'))!;
  t.ok(first, 'issued');
  await manager.idle();
  t.equal(pebble.orders(), 1);

  // the renewal runs just before the end, and the CA's validation lands where nothing answers
  clock.ms = Date.parse(first.notAfter) - 10_000;
  await dns.clearA(hostname);
  await dns.addA(hostname, ['127.0.0.2']);
  await manager.obtain(hostname, 'renewal');
  t.equal(pebble.orders(), 2, 'the renewal was ordered');
  const failed = (await stores.domains.get(hostname))!.certificate;
  t.match(failed, { status: 'issued', lastError: /^challenge: /, failures: 1 }, 'a failed renewal keeps the certificate issued');
  const retryAt = Date.parse(failed.nextAttemptAt!);
  t.ok(retryAt > Date.parse(first.notAfter), 'its backoff ends after the certificate does');

  // expired, backoff still running: handshakes get the fallback and send the CA nothing
  clock.ms = Date.parse(first.notAfter) + 5_000;
  t.equal(await manager.secureContext(hostname), null, 'a handshake gets the fallback');
  t.equal(await manager.secureContext(hostname), null, 'and so does the next');
  await manager.idle();
  t.equal(pebble.orders(), 2, 'no order before the backoff ends');
  t.equal((await stores.domains.get(hostname))!.certificate.nextAttemptAt, failed.nextAttemptAt, 'the backoff is as it was');

  // once it has ended (DNS fixed meanwhile), a handshake orders on demand
  await dns.clearA(hostname);
  await dns.addA(hostname, ['127.0.0.1']);
  clock.ms = retryAt + 1_000;
  t.ok(await manager.secureContext(hostname), 'after the backoff a handshake gets a new certificate');
  t.equal(pebble.orders(), 3);
});
