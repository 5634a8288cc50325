// Issuers in the configuration: PORTICO_ACME_DIRECTORY's list, acme.issuers with EAB, CAA and limits,
// the limit variables, and one message listing every mistake.
import t from 'tap';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseConfig, ConfigError } from '../../src/config.ts';

const file = path.resolve(import.meta.dirname, '../../config/portico.yaml');
const base = readFileSync(file, 'utf8');
const withIssuers = (issuers: string) => base.replace(/^ {2}issuers: null$/m, `  issuers: ${issuers}`);
const parse = (text: string, env: NodeJS.ProcessEnv = {}) => parseConfig(text, file, env, '/tmp');

t.test("the shipped file: Let's Encrypt staging with its published limits", async (t) => {
  const { acme } = parse(base);
  t.match(acme.issuers, [{ directory: 'https://acme-staging-v02.api.letsencrypt.org/directory', caa: ['letsencrypt.org'], eab: null, limits: { newOrdersPer3h: 300, certsPerDomainPerWeek: 50, failedValidationsPerHour: 5 } }]);
  t.equal(acme.directory, acme.issuers[0].directory);
});

t.test('acme.issuers: order, EAB, CAA per issuer; the variable list picks from them', async (t) => {
  const text = withIssuers(`[{directory: "https://acme-v02.api.letsencrypt.org/directory"}, {directory: "https://acme.zerossl.com/v2/DV90", name: zerossl, eab: {kid: kid-1, hmacKey: c2VjcmV0LWtleQ}}, {directory: "https://dv.acme-v02.api.pki.goog/directory", eab: {kid: g, hmacKey: Zw}, limits: {newOrdersPer3h: 100}}]`);
  const { acme } = parse(text);
  t.same(acme.issuers.map((i) => i.name), ['acme-v02.api.letsencrypt.org', 'zerossl', 'dv.acme-v02.api.pki.goog']);
  t.same(acme.issuers[1].eab, { kid: 'kid-1', hmacKey: 'c2VjcmV0LWtleQ' });
  t.same(acme.issuers.map((i) => i.caa), [['letsencrypt.org'], ['sectigo.com', 'zerossl.com'], ['pki.goog']]);
  t.same(acme.issuers[2].limits, { newOrdersPer3h: 100, certsPerDomainPerWeek: null, failedValidationsPerHour: null });
  t.same(acme.caaIdentities, ['letsencrypt.org', 'sectigo.com', 'zerossl.com', 'pki.goog'], 'verification accepts CAA for any of them');
  const picked = parse(text, { PORTICO_ACME_DIRECTORY: 'https://acme.zerossl.com/v2/DV90,https://ca.internal.test/dir', PORTICO_ACME_NEW_ORDERS_PER_3H: '10' }).acme;
  t.same(picked.issuers.map((i) => [i.name, i.eab?.kid ?? null, i.limits.newOrdersPer3h]), [['zerossl', 'kid-1', 10], ['ca.internal.test', null, 10]], 'the variable decides the list and its order; entries lend their settings');
});

t.test('every mistake in one message', async (t) => {
  const text = withIssuers(`[{directory: "ftp://x"}, {directory: "https://ok.test/dir", eab: {kid: k}, colour: red, limits: {newOrdersPer3h: 0, perDay: 3}}, "https://plain.test"]`);
  try {
    parse(text, { PORTICO_ACME_FAILED_VALIDATIONS_PER_HOUR: 'many' });
    t.fail('accepted');
  } catch (err) {
    t.ok(err instanceof ConfigError);
    t.match((err as ConfigError).problems, [
      /acme\.issuers\[0\]\.directory must be an http\(s\) URL/,
      /acme\.issuers\[1\]\.colour is not a known setting/,
      /acme\.issuers\[1\]\.eab must be \{kid, hmacKey\}/,
      /acme\.issuers\[1\]\.limits\.newOrdersPer3h must be an integer ≥ 1/,
      /acme\.issuers\[1\]\.limits\.perDay is not a known setting/,
      /acme\.issuers\[2\] must be a mapping/,
      /acme\.limits\.failedValidationsPerHour \(PORTICO_ACME_FAILED_VALIDATIONS_PER_HOUR\) must be an integer/,
    ]);
  }
});
