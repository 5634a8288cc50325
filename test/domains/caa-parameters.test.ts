// Regressions in the CAA check (RFC 8659, RFC 8657), against a real DNS server (challtestsrv):
// - caa-validationmethods: `issue "letsencrypt.org; validationmethods=dns-01"` verified the domain,
//   though the CA then refuses HTTP-01, the only challenge Portico answers;
// - caa-accounturi: `issue "letsencrypt.org; accounturi=…"` for an account that is not known to be
//   Portico's verified the domain too;
// - caa-found-elsewhere: the advice named the hostname (and asked for a CAA record there) when the
//   CAA set that applied lives where the hostname's CNAME leads;
// - caa-empty-value: `0 issue ""` (no CA may issue), an answer Node's resolver cannot parse, was
//   reported as a DNS failure that is "usually temporary".
import t from 'tap';
import { checkCaa, systemResolver, verifyDomain, type Resolver, type VerifyInput } from '../../src/domains/verifier.ts';
import { startChalltestsrv, type Challtestsrv } from '../helpers/challtestsrv.ts';

const TARGET = 'edge.caa-params.test';
const ACCOUNT = 'https://acme-v02.api.letsencrypt.org/acme/acct/123456789';

let dns: Challtestsrv;
let resolver: Resolver;

t.before(async () => {
  dns = await startChalltestsrv();
  resolver = systemResolver([dns.dnsServer], 1000);
  await dns.addA(TARGET, ['203.0.113.10']);
});
t.teardown(() => dns.stop());

const verify = (input: Partial<VerifyInput> & { hostname: string }) =>
  verifyDomain({ apex: false, cnameTarget: TARGET, caaIdentities: ['letsencrypt.org'], ...input }, resolver);
const codes = (result: { diagnostics: Array<{ code: string }> }) => result.diagnostics.map((d) => d.code);

/** a subdomain pointing at the platform, with `values` as `issue` properties at its parent */
async function zone(parent: string, values: string[], tag = 'issue'): Promise<string> {
  await dns.setCname(`shop.${parent}`, TARGET);
  await dns.addCaa(parent, values.map((value) => ({ tag, value })));
  return `shop.${parent}`;
}

t.test('caa-validationmethods: a list without http-01 does not allow our CA, and the message says so', async (t) => {
  const hostname = await zone('methods-dns.test', ['letsencrypt.org; validationmethods=dns-01']);
  const result = await verify({ hostname });
  t.strictSame(codes(result), ['caa_blocks_ca']);
  t.match(result, { verified: false, pending: false });
  const { message, found, expected } = result.diagnostics[0];
  t.strictSame(found, ['0 issue "letsencrypt.org; validationmethods=dns-01"']);
  t.equal(expected, '0 issue "letsencrypt.org"');
  t.match(message, /The CAA records at methods-dns\.test \(a parent of shop\.methods-dns\.test, so they apply to it\)/);
  t.match(message, /The record 0 issue "letsencrypt\.org; validationmethods=dns-01" restricts letsencrypt\.org to the validation method dns-01, but Portico validates with http-01/);
  t.match(message, /Add the CAA record methods-dns\.test CAA 0 issue "letsencrypt\.org" \(or add http-01 to that record's validationmethods\)/);

  // the certificate side asks the same question before each issuer
  t.strictSame((await checkCaa(hostname, ['letsencrypt.org'], resolver)).map((d) => d.code), ['caa_blocks_ca']);
});

t.test('caa-validationmethods: keys match in any case, whitespace is allowed, method names are exact', async (t) => {
  const allowed = await zone('methods-ok.test', ['LetsEncrypt.org ;\tValidationMethods = dns-01,http-01']);
  t.strictSame(await verify({ hostname: allowed }), { verified: true, pending: false, diagnostics: [] });

  const upper = await zone('methods-upper-key.test', ['letsencrypt.org; VALIDATIONMETHODS=tls-alpn-01,dns-01']);
  const refused = await verify({ hostname: upper });
  t.strictSame(codes(refused), ['caa_blocks_ca']);
  t.match(refused.diagnostics[0].message, /validation methods tls-alpn-01, dns-01, but Portico validates with http-01/);

  const shouted = await zone('methods-upper-value.test', ['letsencrypt.org; validationmethods=HTTP-01']);
  const result = await verify({ hostname: shouted });
  t.strictSame(codes(result), ['caa_blocks_ca'], 'CAs compare method names as written');
  t.match(result.diagnostics[0].message, /method names are lowercase: http-01/);
});

t.test('caa-validationmethods: another record that allows our CA is enough', async (t) => {
  const hostname = await zone('methods-two.test', ['letsencrypt.org; validationmethods=dns-01', 'letsencrypt.org']);
  t.strictSame(await verify({ hostname }), { verified: true, pending: false, diagnostics: [] });
});

t.test('caa-accounturi: an account Portico does not know to be its own does not count; its own does', async (t) => {
  const hostname = await zone('account.test', [`letsencrypt.org; accounturi=${ACCOUNT}`]);
  const unknown = await verify({ hostname });
  t.strictSame(codes(unknown), ['caa_blocks_ca']);
  t.match(unknown.diagnostics[0].message, /allows letsencrypt\.org only for the ACME account https:\/\/acme-v02\.api\.letsencrypt\.org\/acme\/acct\/123456789, and Portico cannot confirm that this account is its own/);
  t.match(unknown.diagnostics[0].message, /Add the CAA record account\.test CAA 0 issue "letsencrypt\.org", keeping/);

  t.strictSame(await verify({ hostname, accountUris: [ACCOUNT] }), { verified: true, pending: false, diagnostics: [] }, 'Portico\'s own account');

  const other = await verify({ hostname, accountUris: ['https://acme-v02.api.letsencrypt.org/acme/acct/42'] });
  t.strictSame(codes(other), ['caa_blocks_ca']);
  t.match(other.diagnostics[0].message, /only for the ACME account https:\S+\/123456789, which is not Portico's account there/);

  // asked of the CAs (a lookup) only when a CAA set has the parameter; a lookup that fails is "not known"
  let asked = 0;
  const lookup = async () => {
    asked += 1;
    return [ACCOUNT];
  };
  t.strictSame(await verify({ hostname, accountUris: lookup }), { verified: true, pending: false, diagnostics: [] }, 'looked up: its own account');
  t.equal(asked, 1, 'asked once');
  const plain = await zone('account-none.test', ['letsencrypt.org']);
  t.strictSame(codes(await verify({ hostname: plain, accountUris: lookup })), [], 'no accounturi anywhere');
  t.equal(asked, 1, 'not asked without an accounturi');
  const failing = await verify({ hostname, accountUris: () => Promise.reject(new Error('CA down')) });
  t.match(failing.diagnostics[0].message, /cannot confirm that this account is its own/, 'a failed lookup: not known');
});

t.test('caa-accounturi: both parameters at once are both explained', async (t) => {
  const hostname = await zone('account-methods.test', [`letsencrypt.org; accounturi=${ACCOUNT}; validationmethods=dns-01`]);
  const result = await verify({ hostname, accountUris: [ACCOUNT] });
  t.strictSame(codes(result), ['caa_blocks_ca'], 'the right account with the wrong method still fails');
  t.match(result.diagnostics[0].message, /restricts letsencrypt\.org to the validation method dns-01/);
  t.notMatch(result.diagnostics[0].message, /not Portico's account/);
});

t.test('parameters that do not follow RFC 8659 §4.2 do not count, and the message says why', async (t) => {
  // RFC 6844's examples separated parameters by spaces: a parameter value cannot hold one
  const hostname = await zone('params-bad.test', ['letsencrypt.org; validationmethods=http-01 accounturi=x']);
  const result = await verify({ hostname });
  t.strictSame(codes(result), ['caa_blocks_ca']);
  t.match(result.diagnostics[0].message, /names letsencrypt\.org, but its parameters do not follow the CAA syntax/);
});

t.test('property tags match in any case (RFC 8659 §4.1)', async (t) => {
  const hostname = await zone('tag-upper.test', ['pki.goog'], 'ISSUE');
  const result = await verify({ hostname });
  t.strictSame(codes(result), ['caa_blocks_ca'], 'ISSUE "pki.goog" is an issue property');
  t.strictSame(result.diagnostics[0].found, ['0 ISSUE "pki.goog"']);
});

t.test('caa-found-elsewhere: a set found through the CNAME is named where it lives', async (t) => {
  // the owner's CNAME still points at the old provider, whose name carries CAA for another CA
  await dns.setCname('shop.moving.test', 'old-host.othercdn.test');
  await dns.addA('old-host.othercdn.test', ['192.0.2.50']);
  await dns.addCaa('old-host.othercdn.test', [{ tag: 'issue', value: 'pki.goog' }]);
  const result = await verify({ hostname: 'shop.moving.test' });
  t.strictSame(codes(result), ['cname_mismatch', 'caa_blocks_ca']);
  const { message } = result.diagnostics[1];
  t.match(message, /The CAA records at old-host\.othercdn\.test, where the CNAME of shop\.moving\.test leads/);
  t.match(message, /once shop\.moving\.test points to edge\.caa-params\.test they no longer apply/);
  t.notMatch(message, /records at shop\.moving\.test/);
  t.notMatch(message, /Add the CAA record shop\.moving\.test/, 'a name with a CNAME cannot have a CAA record beside it');
});

t.test('caa-found-elsewhere: a set on the platform\'s own name is the platform\'s to fix', async (t) => {
  const target = 'edge2.caa-params.test';
  await dns.addA(target, ['203.0.113.20']);
  await dns.addCaa(target, [{ tag: 'issue', value: 'sectigo.com' }]);
  await dns.setCname('shop.ours.test', target);
  const result = await verify({ hostname: 'shop.ours.test', cnameTarget: target });
  t.strictSame(codes(result), ['caa_blocks_ca']);
  t.match(result.diagnostics[0].message, /The CAA records at edge2\.caa-params\.test, where the CNAME of shop\.ours\.test leads/);
  t.match(result.diagnostics[0].message, /edge2\.caa-params\.test is the platform's own name, so this is ours to fix/);
});

t.test('caa-found-elsewhere: a parent that is an alias is named with where it leads', async (t) => {
  await dns.setCname('shop.team.alias-parent.test', TARGET);
  await dns.setCname('team.alias-parent.test', 'zone.hosted-elsewhere.test');
  await dns.addCaa('zone.hosted-elsewhere.test', [{ tag: 'issue', value: ';' }]);
  const result = await verify({ hostname: 'shop.team.alias-parent.test' });
  t.strictSame(codes(result), ['caa_blocks_ca']);
  t.match(result.diagnostics[0].message, /at zone\.hosted-elsewhere\.test, where the CNAME of team\.alias-parent\.test \(a parent of shop\.team\.alias-parent\.test\) leads/);
});

t.test('caa-empty-value: `0 issue ""`, which the resolver cannot parse, is explained, not called temporary', async (t) => {
  const hostname = await zone('empty-issue.test', ['']);
  const result = await verify({ hostname });
  t.strictSame(codes(result), ['dns_error']);
  t.match(result, { verified: false });
  const { message, expected } = result.diagnostics[0];
  t.equal(expected, '0 issue "letsencrypt.org"');
  t.match(message, /The CAA records at empty-issue\.test \(a parent of shop\.empty-issue\.test, so they apply to it\) could not be read/);
  t.match(message, /empty-issue\.test CAA 0 issue "", is answered this way; it allows no certificate authority\. Replace it with empty-issue\.test CAA 0 issue "letsencrypt\.org"/);
  t.notMatch(message, /usually temporary/);
  // the certificate side refuses on the same answer
  t.strictSame((await checkCaa(hostname, ['letsencrypt.org'], resolver)).map((d) => d.code), ['dns_error']);
});
