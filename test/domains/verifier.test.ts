// DNS verification (DESIGN §6) against a real DNS server: pebble-challtestsrv, scripted per test,
// queried through the same node:dns resolver production uses. Every test uses its own names.
import t from 'tap';
import { systemResolver, verifyDomain, type Resolver, type VerifyInput } from '../../src/domains/verifier.ts';
import { startChalltestsrv, type Challtestsrv } from '../helpers/challtestsrv.ts';
import { freePort } from '../helpers/free-port.ts';

const TARGET = 'edge.portico-cdn.test';
const TARGET_A = ['203.0.113.10', '203.0.113.11'];
const TARGET_AAAA = ['2001:db8::10'];

let dns: Challtestsrv;
let resolver: Resolver;

t.before(async () => {
  dns = await startChalltestsrv();
  resolver = systemResolver([dns.dnsServer], 1000);
  await dns.addA(TARGET, TARGET_A);
  await dns.addAAAA(TARGET, TARGET_AAAA);
});
t.teardown(() => dns.stop());

const verify = (input: Partial<VerifyInput> & { hostname: string }) =>
  verifyDomain({ apex: false, cnameTarget: TARGET, caaIdentities: ['letsencrypt.org'], ...input }, resolver);
const codes = (result: { diagnostics: Array<{ code: string }> }) => result.diagnostics.map((d) => d.code);

t.test('subdomain: a CNAME to the target verifies', async (t) => {
  await dns.setCname('shop.cname-ok.test', TARGET);
  t.strictSame(await verify({ hostname: 'shop.cname-ok.test' }), { verified: true, pending: false, diagnostics: [] });
});

t.test('subdomain: the CNAME matches whatever the case and trailing dots', async (t) => {
  await dns.setCname('shop.cname-case.test', 'Edge.Portico-CDN.TEST');
  const result = await verify({ hostname: 'Shop.Cname-Case.test.', cnameTarget: `${TARGET.toUpperCase()}.` });
  t.strictSame(codes(result), []);
  t.equal(result.verified, true);
});

t.test('subdomain: a CNAME to another value is a mismatch showing found and expected', async (t) => {
  await dns.setCname('shop.cname-wrong.test', 'old-host.herokudns.test');
  const result = await verify({ hostname: 'shop.cname-wrong.test' });
  t.strictSame(codes(result), ['cname_mismatch']);
  t.match(result.diagnostics[0], { found: ['old-host.herokudns.test'], expected: TARGET });
  t.match(result.diagnostics[0].message, /old-host\.herokudns\.test.*must point to edge\.portico-cdn\.test/);
  t.match(result, { verified: false, pending: false });
});

t.test('subdomain: an A record where the CNAME should be is a conflict showing the addresses', async (t) => {
  await dns.addA('shop.a-only.test', ['192.0.2.7', '192.0.2.8']);
  const result = await verify({ hostname: 'shop.a-only.test' });
  t.strictSame(codes(result), ['a_record_conflict']);
  t.strictSame(result.diagnostics[0].found, ['192.0.2.7', '192.0.2.8']);
  t.match(result.diagnostics[0].message, /192\.0\.2\.7, 192\.0\.2\.8.*Delete those A\/AAAA records and create a CNAME record for shop\.a-only\.test pointing to edge\.portico-cdn\.test/);
  t.match(result, { verified: false, pending: false });
});

t.test('subdomain: an AAAA record alone is a conflict too', async (t) => {
  await dns.addAAAA('shop.aaaa-only.test', ['2001:db8::99']);
  const result = await verify({ hostname: 'shop.aaaa-only.test' });
  t.strictSame(codes(result), ['a_record_conflict']);
  t.strictSame(result.diagnostics[0].found, ['2001:db8::99']);
});

t.test('subdomain: nothing at all yet is cname_missing, pending', async (t) => {
  const result = await verify({ hostname: 'shop.nothing.test' });
  t.strictSame(codes(result), ['cname_missing']);
  t.match(result.diagnostics[0].message, /No CNAME record for shop\.nothing\.test was found yet.*pointing to edge\.portico-cdn\.test.*48 hours.*minutes/);
  t.match(result, { verified: false, pending: true });
});

t.test('apex: A/AAAA equal to the target\'s verify (flattened ALIAS)', async (t) => {
  await dns.addA('apex-ok.test', [...TARGET_A].reverse());
  await dns.addAAAA('apex-ok.test', TARGET_AAAA);
  t.strictSame(await verify({ hostname: 'apex-ok.test', apex: true }), { verified: true, pending: false, diagnostics: [] });
});

t.test('apex: a CNAME to the target returned as is verifies', async (t) => {
  await dns.setCname('apex-cname.test', TARGET);
  t.strictSame(codes(await verify({ hostname: 'apex-cname.test', apex: true })), []);
});

t.test('apex: other addresses are a mismatch showing both sets', async (t) => {
  await dns.addA('apex-wrong.test', ['198.51.100.1']);
  const result = await verify({ hostname: 'apex-wrong.test', apex: true });
  t.strictSame(codes(result), ['apex_address_mismatch']);
  t.strictSame(result.diagnostics[0].found, ['198.51.100.1']);
  t.equal(result.diagnostics[0].expected, '2001:db8::10, 203.0.113.10, 203.0.113.11');
  t.match(result.diagnostics[0].message, /198\.51\.100\.1.*203\.0\.113\.10/);
  t.match(result, { verified: false, pending: false });
});

t.test('apex: only some of the target\'s addresses is still a mismatch', async (t) => {
  await dns.addA('apex-partial.test', [TARGET_A[0]]);
  t.strictSame(codes(await verify({ hostname: 'apex-partial.test', apex: true })), ['apex_address_mismatch']);
});

t.test('apex: nothing yet is cname_missing, pending', async (t) => {
  const result = await verify({ hostname: 'apex-nothing.test', apex: true });
  t.strictSame(codes(result), ['cname_missing']);
  t.match(result.diagnostics[0].message, /ALIAS.*apex-nothing\.test.*edge\.portico-cdn\.test/);
  t.match(result, { verified: false, pending: true });
});

t.test('apex: a CNAME elsewhere that resolves to nothing is a mismatch', async (t) => {
  await dns.setCname('apex-cname-wrong.test', 'parked.registrar.test');
  const result = await verify({ hostname: 'apex-cname-wrong.test', apex: true });
  t.strictSame(codes(result), ['cname_mismatch']);
  t.strictSame(result.diagnostics[0].found, ['parked.registrar.test']);
});

t.test('CAA at the name that names another CA blocks, naming the record to add', async (t) => {
  await dns.addA('caa-name.test', TARGET_A);
  await dns.addAAAA('caa-name.test', TARGET_AAAA);
  await dns.addCaa('caa-name.test', [{ tag: 'issue', value: 'pki.goog' }, { tag: 'iodef', value: 'mailto:security@caa-name.test' }]);
  const result = await verify({ hostname: 'caa-name.test', apex: true });
  t.strictSame(codes(result), ['caa_blocks_ca']);
  t.equal(result.diagnostics[0].expected, '0 issue "letsencrypt.org"');
  t.match(result.diagnostics[0].message, /caa-name\.test CAA 0 issue "letsencrypt\.org"/);
  t.match(result.diagnostics[0].found, ['0 issue "pki.goog"', '0 iodef "mailto:security@caa-name.test"']);
  t.match(result, { verified: false, pending: false });
});

t.test('CAA at a parent blocks a subdomain; issue ";" forbids every CA', async (t) => {
  await dns.setCname('shop.caa-parent.test', TARGET);
  await dns.addCaa('caa-parent.test', [{ tag: 'issue', value: ';' }]);
  const result = await verify({ hostname: 'shop.caa-parent.test' });
  t.strictSame(codes(result), ['caa_blocks_ca']);
  t.match(result.diagnostics[0].message, /caa-parent\.test \(a parent of shop\.caa-parent\.test.*caa-parent\.test CAA 0 issue "letsencrypt\.org"/);
});

t.test('CAA two levels up blocks too, and the nearest non-empty set is the one that counts', async (t) => {
  await dns.setCname('a.b.caa-deep.test', TARGET);
  await dns.addCaa('caa-deep.test', [{ tag: 'issue', value: 'sectigo.com' }]);
  t.strictSame(codes(await verify({ hostname: 'a.b.caa-deep.test' })), ['caa_blocks_ca']);
  // a nearer set that allows us wins over the parent's
  await dns.addCaa('b.caa-deep.test', [{ tag: 'issue', value: 'letsencrypt.org' }]);
  t.strictSame(codes(await verify({ hostname: 'a.b.caa-deep.test' })), []);
});

t.test('CAA that allows our CA (any case, with parameters) or has no issue property passes', async (t) => {
  await dns.setCname('shop.caa-allow.test', TARGET);
  await dns.addCaa('caa-allow.test', [
    { tag: 'issue', value: 'pki.goog' },
    { tag: 'issue', value: ' LetsEncrypt.org; validationmethods=http-01' },
  ]);
  t.strictSame(await verify({ hostname: 'shop.caa-allow.test' }), { verified: true, pending: false, diagnostics: [] });

  await dns.setCname('shop.caa-wild.test', TARGET);
  await dns.addCaa('caa-wild.test', [{ tag: 'issuewild', value: ';' }, { tag: 'iodef', value: 'mailto:x@caa-wild.test' }]);
  t.strictSame(codes(await verify({ hostname: 'shop.caa-wild.test' })), [], 'issuewild does not apply to a non-wildcard name');
});

t.test('SERVFAIL is a dns_error naming the query, pending', async (t) => {
  await dns.setCname('shop.servfail.test', TARGET);
  await dns.setServfail('shop.servfail.test');
  const result = await verify({ hostname: 'shop.servfail.test' });
  t.strictSame(codes(result), ['dns_error', 'dns_error']);
  t.match(result.diagnostics[0].message, /CNAME record of shop\.servfail\.test failed \(SERVFAIL\).*verify again/);
  t.match(result.diagnostics[1].message, /CAA record of shop\.servfail\.test/);
  t.match(result, { verified: false, pending: true });

  await dns.clearServfail('shop.servfail.test');
  t.strictSame(codes(await verify({ hostname: 'shop.servfail.test' })), [], 'verifies once the server answers');
});

t.test('a DNS server that does not answer is a dns_error, not "missing"', async (t) => {
  // a closed UDP port on loopback: ICMP port unreachable (ECONNREFUSED)
  const closed = systemResolver([`127.0.0.1:${await freePort()}`], 300);
  const result = await verifyDomain({ hostname: 'shop.example.test', apex: false, cnameTarget: TARGET, caaIdentities: ['letsencrypt.org'] }, closed);
  t.ok(result.diagnostics.length > 0);
  t.strictSame([...new Set(codes(result))], ['dns_error']);
  t.match(result, { verified: false, pending: true });
});

t.test('ownership TXT: present verifies; absent or wrong is ownership_txt_missing', async (t) => {
  await dns.setCname('shop.owned.test', TARGET);
  await dns.addTxt('_portico.shop.owned.test', 'google-site-verification=abc');
  await dns.addTxt('_portico.shop.owned.test', 'ptk_123');
  t.strictSame(await verify({ hostname: 'shop.owned.test', ownershipToken: 'ptk_123' }), { verified: true, pending: false, diagnostics: [] });

  const wrong = await verify({ hostname: 'shop.owned.test', ownershipToken: 'ptk_456' });
  t.strictSame(codes(wrong), ['ownership_txt_missing']);
  t.match(wrong.diagnostics[0], { expected: 'ptk_456', found: ['google-site-verification=abc', 'ptk_123'] });

  await dns.setCname('shop.unowned.test', TARGET);
  const missing = await verify({ hostname: 'shop.unowned.test', ownershipToken: 'ptk_789' });
  t.strictSame(codes(missing), ['ownership_txt_missing']);
  t.match(missing.diagnostics[0].message, /TXT record at _portico\.shop\.unowned\.test with the value ptk_789/);
  t.match(missing, { verified: false, pending: true });
});

t.test('every finding is returned, and one that is not propagation makes it failed', async (t) => {
  await dns.setCname('shop.everything.test', 'elsewhere.test');
  await dns.addCaa('everything.test', [{ tag: 'issue', value: 'pki.goog' }]);
  const result = await verify({ hostname: 'shop.everything.test', ownershipToken: 'ptk_1' });
  t.strictSame(codes(result), ['cname_mismatch', 'caa_blocks_ca', 'ownership_txt_missing']);
  t.match(result, { verified: false, pending: false });
});

t.test('a TXT value that is not UTF-8 is quoted byte by byte, its controls escaped', async (t) => {
  // no DNS server hands out bytes that are not UTF-8 on request (challtestsrv takes JSON strings): a
  // resolver answering as node:dns does, one character per byte
  const bytes: Resolver = {
    ...resolver,
    resolveCname: async () => [TARGET],
    resolveCaa: async () => [],
    resolveTxt: async () => [[Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x85, 0x20]).toString('latin1'), Buffer.from('ok\u202e', 'utf8').toString('latin1')]],
  };
  const result = await verifyDomain({ hostname: 'shop.bytes.test', apex: false, cnameTarget: TARGET, caaIdentities: ['letsencrypt.org'], ownershipToken: 'ptk_1' }, bytes);
  t.strictSame(codes(result), ['ownership_txt_missing']);
  t.strictSame(result.diagnostics[0].found, ['caf\u00e9\\x85 ok\u00e2\\x80\u00ae'], 'not UTF-8 as a whole: one character per byte, C1 bytes escaped');
});
