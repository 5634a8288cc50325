// Regression: with no PORTICO_ACME_EMAIL, a second ACME client on the same account key (a restart, or
// another instance on the same Redis) could not order: registering the existing account again made
// acme-client send `{termsOfServiceAgreed: true}` as an account update, which the CA refused ("Use
// POST-as-GET to retrieve account data instead of doing an empty update"); and two instances
// registering one new key at the same moment could hit the same refusal.
import t from 'tap';
import http from 'node:http';
import { createAcmeIssuer, type AccountKeyStore, type ChallengeStore } from '../../src/certs/acme-issuer.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startPebble } from '../helpers/pebble.ts';

t.test('two clients on one account key, no contact e-mail: both order', async (t) => {
  const answers = new Map<string, string>();
  const listener = http.createServer((req, res) => {
    const answer = answers.get((req.url ?? '').split('/').pop() ?? '');
    res.statusCode = answer === undefined ? 404 : 200;
    res.end(answer);
  });
  await new Promise<void>((r) => listener.listen(0, '127.0.0.1', r));
  t.teardown(() => listener.close());
  const dns = await startChalltestsrv();
  t.teardown(() => dns.stop());
  const pebble = await startPebble({ httpPort: (listener.address() as { port: number }).port, dnsServer: dns.dnsServer });
  t.teardown(() => pebble.stop());
  await dns.addA('one.example.com', ['127.0.0.1']);
  await dns.addA('two.example.com', ['127.0.0.1']);
  const challenges: ChallengeStore = { async set(token, value) { answers.set(token, value); }, async remove(token) { answers.delete(token); } };
  let pem: string | null = null;
  const accountKeys: AccountKeyStore = { load: async () => pem, save: async (value) => { pem = value; } };
  const open = () => createAcmeIssuer({ directoryUrl: pebble.directoryUrl, email: null, accountKeys, challenges, ca: pebble.caCertPem });

  t.ok(await open().issue('one.example.com'), 'the first client registers the account and orders');
  t.ok(await open().issue('two.example.com'), 'a second client on the same key finds the account and orders too');
  t.equal(pebble.orders(), 2);

  // two instances with a key nobody registered yet, ordering at the same moment: one registers the
  // account, the other finds it registered between its lookup and its registration
  await dns.addA('three.example.com', ['127.0.0.1']);
  await dns.addA('four.example.com', ['127.0.0.1']);
  const { createPrivateEcdsaKey } = (await import('acme-client')).crypto;
  pem = (await createPrivateEcdsaKey()).toString();
  const results = await Promise.allSettled([open().issue('three.example.com'), open().issue('four.example.com')]);
  t.same(results.map((r) => (r.status === 'rejected' ? String(r.reason) : 'issued')), ['issued', 'issued']);
});
