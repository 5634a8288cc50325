// Which hostnames an owner may add, and the records they are shown (DESIGN §5). Pure: no peers.
import t, { type Test } from 'tap';
import { dnsRecords, validateDomainHostname } from '../../src/domains/hostname-rules.ts';

const rules = { platformDomain: 'portico.test', apiHosts: ['api.petstore.test', 'api-staging.petstore.test'], cnameTarget: 'edge.cdn-portico.net' };
const validate = (input: unknown) => validateDomainHostname(input, rules);

function rejects(t: Test, input: unknown, reason: RegExp, what: string) {
  const result = validate(input);
  if (!('error' in result)) return t.fail(`${what}: ${JSON.stringify(input)} was accepted as ${result.hostname}`);
  t.match(result.error, reason, `${what}: ${JSON.stringify(input)} → ${result.error}`);
}

t.test('accepted hostnames are normalised and split into label and apex', async (t) => {
  t.strictSame(validate('shop.example.com'), { hostname: 'shop.example.com', apex: false, label: 'shop' });
  t.strictSame(validate('  Shop.Example.COM.  '), { hostname: 'shop.example.com', apex: false, label: 'shop' }, 'trim, lowercase, one trailing dot');
  t.strictSame(validate('example.com'), { hostname: 'example.com', apex: true, label: '@' });
  t.strictSame(validate('example.co.uk'), { hostname: 'example.co.uk', apex: true, label: '@' }, 'co.uk is a public suffix');
  t.strictSame(validate('a.b.example.co.uk'), { hostname: 'a.b.example.co.uk', apex: false, label: 'a.b' });
  t.strictSame(validate('shop.example.test'), { hostname: 'shop.example.test', apex: false, label: 'shop' }, 'unknown TLD: the PSL default rule *');
  t.strictSame(validate('example.test'), { hostname: 'example.test', apex: true, label: '@' });
  t.strictSame(validate('foo.github.io'), { hostname: 'foo.github.io', apex: false, label: 'foo' }, 'private PSL section ignored');
  t.strictSame(validate('my-shop.example.com'), { hostname: 'my-shop.example.com', apex: false, label: 'my-shop' });
  t.strictSame(validate('xn--bcher-kva.example'), { hostname: 'xn--bcher-kva.example', apex: true, label: '@' }, 'punycode accepted as is');
  t.strictSame(validate('portico.test.example.com'), { hostname: 'portico.test.example.com', apex: false, label: 'portico.test' }, 'platform domain as a prefix is fine');
  t.strictSame(validate(`${'a'.repeat(63)}.example.com`), { hostname: `${'a'.repeat(63)}.example.com`, apex: false, label: 'a'.repeat(63) }, '63-character label');
});

t.test('IDNA: Unicode hostnames become punycode', async (t) => {
  t.strictSame(validate('bücher.example'), { hostname: 'xn--bcher-kva.example', apex: true, label: '@' });
  t.strictSame(validate('BÜCHER.example'), { hostname: 'xn--bcher-kva.example', apex: true, label: '@' });
  t.strictSame(validate('shop.bücher.example'), { hostname: 'shop.xn--bcher-kva.example', apex: false, label: 'shop' });
  t.strictSame(validate('shop.公司.cn'), { hostname: 'shop.xn--55qx5d.cn', apex: true, label: '@' }, '公司.cn is a public suffix itself');
  t.strictSame(validate('shop。example。com'), { hostname: 'shop.example.com', apex: false, label: 'shop' }, 'ideographic full stops');
});

t.test('not a string, or empty', async (t) => {
  for (const input of [undefined, null, 42, {}, ['example.com'], '', '   ', '.']) rejects(t, input, /^A hostname is required; use a hostname such as shop\.example\.com$/, 'missing');
});

t.test('IP literals', async (t) => {
  for (const input of ['192.0.2.1', '::1', '2001:db8::1', '[2001:db8::1]', '[::1]', '10.0.0.1.']) rejects(t, input, /IP addresses cannot be added as domains; use a hostname such as shop\.example\.com/, 'IP');
  for (const input of ['1.2.3', '0x7f.1', 'example.123']) rejects(t, input, /IP address/, 'reads as an IP');
});

t.test('wildcards', async (t) => {
  for (const input of ['*.example.com', '*', 'shop*.example.com']) rejects(t, input, /Wildcard/, 'wildcard');
});

t.test('labels: characters, hyphens, length, empties', async (t) => {
  rejects(t, '-shop.example.com', /"-shop" is not valid/, 'leading hyphen');
  rejects(t, 'shop-.example.com', /"shop-" is not valid/, 'trailing hyphen');
  rejects(t, 'my_shop.example.com', /contains "_"/, 'underscore');
  rejects(t, 'shop example.com', /contains " "/, 'space');
  rejects(t, 'https://shop.example.com', /contains ":"/, 'a URL');
  rejects(t, 'shop.example.com/path', /contains "\/"/, 'a path');
  rejects(t, 'shop.example.com:443', /contains ":"/, 'a port');
  rejects(t, 'sh%6fp.example.com', /contains "%"/, 'percent-encoding');
  rejects(t, 'shop..example.com', /empty label/, 'two dots');
  rejects(t, '.shop.example.com', /empty label/, 'leading dot');
  rejects(t, 'example.com..', /empty label/, 'two trailing dots');
  rejects(t, `${'a'.repeat(64)}.example.com`, /64 characters long; .*at most 63/, 'label of 64');
  rejects(t, 'xn--zz.example', /not valid IDNA/, 'bad punycode');
  rejects(t, 'xn--.example.com', /"xn--" is not valid/, 'empty punycode');
});

t.test('total length', async (t) => {
  const long = `${Array.from({ length: 4 }, () => 'a'.repeat(63)).join('.')}.com`; // 4×63 + 3 + 4 = 259
  rejects(t, long, /259 characters long; a hostname can have at most 253/, 'over 253');
  const fits = `${Array.from({ length: 3 }, () => 'a'.repeat(63)).join('.')}.${'b'.repeat(57)}.com`; // 253
  t.equal(fits.length, 253);
  t.notOk('error' in validate(fits), '253 is allowed');
});

t.test('single labels, localhost and public suffixes', async (t) => {
  rejects(t, 'example', /single label/, 'one label');
  rejects(t, 'localhost', /single label|localhost/, 'localhost');
  rejects(t, 'localhost.', /single label|localhost/, 'localhost.');
  rejects(t, 'shop.localhost', /localhost names cannot be added/, 'under .localhost');
  rejects(t, 'co.uk', /public suffix/, 'a public suffix');
});

t.test('reserved: platform domain, API hosts, CNAME target', async (t) => {
  rejects(t, 'portico.test', /at or under portico\.test/, 'the platform domain');
  rejects(t, 'shop.portico.test', /at or under portico\.test/, 'a default hostname');
  rejects(t, 'A.B.Portico.Test.', /at or under portico\.test/, 'under it, any case');
  rejects(t, 'api.petstore.test', /API hostname/, 'API host');
  rejects(t, 'API-Staging.petstore.test', /API hostname/, 'staging API host');
  rejects(t, 'edge.cdn-portico.net', /CNAME target/, 'CNAME target');
  rejects(t, 'x.edge.cdn-portico.net', /CNAME target/, 'under the CNAME target');
  t.notOk('error' in validate('shop.petstore.test'), 'a sibling of an API host is allowed');
  t.notOk('error' in validate('cdn-portico.net'), 'the parent of the CNAME target is allowed');
});

t.test('rules given with a trailing dot or in capitals still apply', async (t) => {
  const loose = { platformDomain: 'Portico.Test.', apiHosts: ['API.petstore.test.'], cnameTarget: 'Edge.cdn-portico.net.' };
  for (const input of ['x.portico.test', 'api.petstore.test', 'edge.cdn-portico.net']) {
    t.ok('error' in validateDomainHostname(input, loose), input);
  }
});

t.test('records: CNAME for a subdomain, ALIAS at the apex, TXT for the takeover guard', async (t) => {
  const target = rules.cnameTarget;
  t.strictSame(dnsRecords({ hostname: 'shop.example.com', apex: false, label: 'shop' }, target), [
    { type: 'CNAME', name: 'shop', value: target, ttl: 3600 },
  ]);
  t.strictSame(dnsRecords({ hostname: 'a.b.example.co.uk', apex: false, label: 'a.b' }, target, 'tok-1'), [
    { type: 'CNAME', name: 'a.b', value: target, ttl: 3600 },
    { type: 'TXT', name: '_portico.a.b', value: 'tok-1', ttl: 3600 },
  ]);
  const apex = dnsRecords({ hostname: 'example.com', apex: true, label: '@' }, target, 'tok-2');
  t.equal(apex.length, 2);
  t.match(apex[0], { type: 'ALIAS', name: '@', value: target, ttl: 3600 });
  t.match(apex[0].note, /ALIAS\/ANAME \(CNAME flattening\) at the apex is provider-specific/);
  t.strictSame(apex[1], { type: 'TXT', name: '_portico', value: 'tok-2', ttl: 3600 });
});
