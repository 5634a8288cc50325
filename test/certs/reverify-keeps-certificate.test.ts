// Regression: Re-verify on a domain with a valid certificate ordered a new one on every press (three
// presses, three certificates), and Portico does not track the CA's duplicate-certificate limit (Let's
// Encrypt refuses a sixth for the same names in a week). Re-verify still resets the backoff and starts
// a certificate attempt, but the attempt keeps a certificate that is valid, not due for renewal and
// from an issuer still configured; it orders when the certificate is due or from another issuer.
// Real pebble, injected clock.
import t from 'tap';
import { X509Certificate } from 'node:crypto';
import { startManagerBed } from '../helpers/cert-manager.ts';

const serial = (pem: string) => new X509Certificate(pem).serialNumber;

t.test('reverify on a valid certificate keeps it; one due or from another CA is replaced', async (t) => {
  const bed = await startManagerBed();
  t.teardown(() => bed.stop());
  const { manager, stores, certs, pebble, clock } = bed;
  const hostname = 'press.example.org';
  await bed.addVerified(hostname);
  const first = (await manager.obtain(hostname, 'verified'))!;
  await manager.idle();
  t.equal(pebble.orders(), 1, 'issued once');

  const reverify = async () => {
    manager.onVerified((await stores.domains.get(hostname))!, 'reverify');
    await manager.idle();
  };
  for (let press = 0; press < 3; press++) await reverify();
  // an order it started would be with pebble well within this (without the attempt being awaited)
  await new Promise((r) => setTimeout(r, 1500));
  await manager.idle();
  t.equal(pebble.orders(), 1, 'three presses, no new order');
  t.equal(serial((await certs.certificates.get(hostname))!.certPem), serial(first.certPem), 'the certificate is the same');
  t.equal((await stores.domains.get(hostname))!.certificate.status, 'issued');

  // a certificate from a CA no longer configured (the directory was changed, e.g. staging → production)
  await certs.certificates.put({ ...first, directory: 'https://acme-staging.example/directory' });
  await reverify();
  t.equal(pebble.orders(), 2, 'a certificate from an issuer no longer configured is replaced');
  const second = (await certs.certificates.get(hostname))!;
  t.equal(second.directory, pebble.directoryUrl);
  t.not(serial(second.certPem), serial(first.certPem));

  // inside the renewal window (the last third of the lifetime)
  clock.ms = Date.parse(second.notBefore) + (Date.parse(second.notAfter) - Date.parse(second.notBefore)) * 0.8;
  await reverify();
  t.equal(pebble.orders(), 3, 'a certificate due for renewal is renewed');
  t.not(serial((await certs.certificates.get(hostname))!.certPem), serial(second.certPem));
});
