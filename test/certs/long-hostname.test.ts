// Long hostnames through the whole path. A hostname may have 253 characters, a file name 255 bytes
// (which such a hostname plus a suffix passes), a certificate's common name 64 characters.
import t from 'tap';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { X509Certificate } from 'node:crypto';
import * as acme from 'acme-client';
import { csrNames } from '../../src/certs/acme-issuer.ts';
import { openEmbeddedStores } from '../../src/state/embedded.ts';
import { domainEvent } from '../../src/domains/events.ts';
import type { Domain } from '../../src/state/types.ts';
import { startManagerBed } from '../helpers/cert-manager.ts';
import { cleanup, tempDir } from '../helpers/portico.ts';

/** a hostname of `length` characters: labels of 63, then a shorter one, then example.org */
function hostnameOf(length: number): string {
  const labels: string[] = [];
  for (let left = length - '.example.org'.length; left > 0; left -= labels.at(-1)!.length + 1) {
    labels.push('abcdefgh'[labels.length].repeat(left === 64 ? 62 : Math.min(63, left)));
  }
  return `${labels.join('.')}.example.org`;
}

t.test('a 253-character hostname is stored, changed, read and removed in embedded state', async (t) => {
  const longest = hostnameOf(253);
  t.equal(longest.length, 253);
  const dataDir = tempDir('long-hostname');
  const stores = await openEmbeddedStores(dataDir);
  t.teardown(async () => {
    await stores.close();
    cleanup(dataDir);
  });
  const domain: Domain = { hostname: longest, projectId: 'prj_1', accountId: 'acc_1', primary: false, status: 'verified', apex: false, records: [], diagnostics: [], certificate: { status: 'none' }, createdAt: new Date().toISOString() };
  t.equal(await stores.domains.create(domain, domainEvent('added', 'Added.')), null, 'created');
  await stores.domains.setCertificate(longest, { status: 'pending' }, domainEvent('order_placed', 'Ordered.'));
  await stores.domains.appendEvent(longest, domainEvent('challenge_served', 'Served.'));
  t.equal((await stores.domains.get(longest))?.certificate.status, 'pending');
  t.same((await stores.domains.events(longest)).map((e) => e.type), ['added', 'order_placed', 'challenge_served']);
  const names = readdirSync(path.join(dataDir, 'domains'));
  t.ok(names.every((n) => Buffer.byteLength(n) <= 255), `file names fit (${names.map((n) => n.length).join(', ')})`);
  t.match(await stores.domains.remove(longest, new Date().toISOString()), { hostname: longest });
  t.equal(await stores.domains.get(longest), null);
  t.same(readdirSync(path.join(dataDir, 'domains')), [], 'its files are gone');
});

t.test('a CSR names a hostname of more than 64 characters by its SAN alone', async (t) => {
  for (const length of [64, 65, 253]) {
    const name = hostnameOf(length);
    const [, csr] = await acme.crypto.createCsr(csrNames(name), await acme.crypto.createPrivateEcdsaKey('P-256'));
    t.same(acme.crypto.readCsrDomains(csr), { commonName: length <= 64 ? name : null, altNames: [name] }, `${length} characters`);
  }
});

t.test('a certificate from a real CA for a hostname longer than a common name may be', async (t) => {
  // 100: the challenge server's DNS answers for far longer names are more than pebble's resolver reads
  const name = hostnameOf(100);
  const bed = await startManagerBed();
  t.teardown(() => bed.stop());
  await bed.addVerified(name);
  await bed.manager.obtain(name, 'verified');
  await bed.manager.idle();
  const domain = await bed.stores.domains.get(name);
  t.equal(domain?.certificate.status, 'issued', JSON.stringify(domain?.certificate).slice(0, 300));
  const stored = await bed.certs.certificates.get(name);
  t.equal(stored && new X509Certificate(stored.certPem).subjectAltName, `DNS:${name}`);
});
