// The ACME issuer against a real pebble, with challtestsrv as the DNS pebble's VA uses and a plain
// HTTP server playing the edge's HTTP listener for /.well-known/acme-challenge/ (RFC 8555 §8.3).
import t from 'tap';
import http from 'node:http';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { createAcmeIssuer, IssueError, problemKind, type AccountKeyStore, type ChallengeStore } from '../../src/certs/acme-issuer.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startPebble } from '../helpers/pebble.ts';

const keyAuthorizations = new Map<string, string>();
const challengeRequests: string[] = [];
const listener = http.createServer((req, res) => {
  const token = /^\/\.well-known\/acme-challenge\/([\w-]+)$/.exec(req.url ?? '')?.[1];
  const answer = token === undefined ? undefined : keyAuthorizations.get(token);
  challengeRequests.push(`${req.headers.host}${req.url}`);
  res.statusCode = answer === undefined ? 404 : 200;
  res.end(answer);
});
await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
t.teardown(() => listener.close());

const dns = await startChalltestsrv();
t.teardown(() => dns.stop());
const pebble = await startPebble({ httpPort: (listener.address() as { port: number }).port, dnsServer: dns.dnsServer });
t.teardown(() => pebble.stop());
await dns.addA('shop.example.com', ['127.0.0.1']);
await dns.addA('other.example.com', ['127.0.0.1']);
await dns.addA('wrong.example.com', ['127.0.0.1']);

const challenges: ChallengeStore = {
  async set(token, keyAuthorization) { keyAuthorizations.set(token, keyAuthorization); },
  async remove(token) { keyAuthorizations.delete(token); },
};

function memoryAccountKeys() {
  const calls = { loads: 0, saves: 0 };
  let pem: string | null = null;
  const store: AccountKeyStore = {
    async load() { calls.loads += 1; return pem; },
    async save(value) { calls.saves += 1; pem = value; },
  };
  return { store, calls, pem: () => pem };
}

const caught = async (promise: Promise<unknown>): Promise<IssueError> => {
  try {
    await promise;
  } catch (err) {
    if (err instanceof IssueError) return err;
    throw err;
  }
  throw new Error('expected an IssueError');
};

const accountKeys = memoryAccountKeys();
const issuer = createAcmeIssuer({ directoryUrl: pebble.directoryUrl, email: 'ops@example.com', accountKeys: accountKeys.store, challenges, ca: pebble.caCertPem });

t.test('issues a P-256 certificate for the hostname whose chain ends at pebble\'s root', async (t) => {
  const started = Date.now();
  const issued = await issuer.issue('shop.example.com');
  t.comment(`first order (with account registration): ${Date.now() - started} ms`);

  const [leafPem, ...chainPems] = issued.certPem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [''];
  const leaf = new X509Certificate(leafPem);
  t.equal(leaf.subjectAltName, 'DNS:shop.example.com');
  t.ok(leaf.checkHost('shop.example.com'));
  const key = createPrivateKey(issued.keyPem);
  t.same(key.asymmetricKeyDetails, { namedCurve: 'prime256v1' }, 'EC P-256 key');
  t.ok(leaf.checkPrivateKey(key), 'the key is the leaf\'s');

  t.equal(chainPems.length, 1, 'leaf + one intermediate');
  const intermediate = new X509Certificate(chainPems[0]);
  const root = new X509Certificate(await pebble.rootPem());
  t.equal(intermediate.fingerprint256, new X509Certificate(await pebble.intermediatePem()).fingerprint256);
  t.ok(leaf.checkIssued(intermediate) && leaf.verify(intermediate.publicKey), 'leaf signed by the intermediate');
  t.ok(intermediate.checkIssued(root) && intermediate.verify(root.publicKey), 'intermediate signed by the root');
  t.ok(root.verify(root.publicKey), 'root is self-signed');

  t.equal(issued.notAfter, leaf.validToDate.toISOString());
  t.equal(issued.notBefore, leaf.validFromDate.toISOString());
  t.ok(Date.parse(issued.notAfter) > Date.now());
  t.match(issued.issuer, /^Pebble Intermediate CA [0-9a-f]+$/);

  t.ok(challengeRequests.some((line) => line.startsWith('shop.example.com:')), 'pebble fetched the challenge from our listener');
  t.equal(keyAuthorizations.size, 0, 'challenge removed after the order');
  t.equal(issuer.orders(), 1);
  t.equal(pebble.orders(), 1);
  t.equal(accountKeys.calls.saves, 1, 'account key made and saved once');
});

t.test('the account key is reused: by the same issuer, and by a new one on the same store', async (t) => {
  const pem = accountKeys.pem();
  let started = Date.now();
  await issuer.issue('shop.example.com');
  t.comment(`second order, same issuer: ${Date.now() - started} ms`);
  t.equal(accountKeys.calls.saves, 1, 'not saved again');
  t.equal(accountKeys.calls.loads, 2, 'loaded once per issuer, and read back once after saving a new key (the key kept wins)');

  const restarted = createAcmeIssuer({ directoryUrl: pebble.directoryUrl, email: 'ops@example.com', accountKeys: accountKeys.store, challenges, ca: pebble.caCertPem });
  started = Date.now();
  await restarted.issue('other.example.com');
  t.comment(`order from a new issuer on the saved key: ${Date.now() - started} ms`);
  t.equal(accountKeys.calls.saves, 1, 'a new issuer loads the saved key instead of making one');
  t.equal(accountKeys.pem(), pem);
  t.equal(restarted.orders(), 1, 'orders are counted per issuer');
  t.equal(issuer.orders(), 2);
  t.equal(pebble.orders(), 3);
});

t.test('concurrent first orders register one account', async (t) => {
  const keys = memoryAccountKeys();
  const fresh = createAcmeIssuer({ directoryUrl: pebble.directoryUrl, email: null, accountKeys: keys.store, challenges, ca: pebble.caCertPem });
  const certificates = await Promise.all([fresh.issue('shop.example.com'), fresh.issue('other.example.com')]);
  t.equal(certificates.length, 2);
  t.equal(keys.calls.saves, 1);
  t.equal(keys.calls.loads, 2, 'loaded, saved, read back');
  t.equal(fresh.orders(), 2, 'no de-duplication here: two calls, two orders');
  t.equal(keyAuthorizations.size, 0);
});

// pebble 2.4.0's VA reports a name it cannot resolve as `connection` ("could not resolve URL"), not
// `dns`: so does an unanswered HTTP-01 fetch. Boulder (Let's Encrypt) sends `dns` for NXDOMAIN.
t.test('a name that does not resolve: challenge (connection), fast, challenge removed', async (t) => {
  const before = pebble.orders();
  const started = Date.now();
  const err = await caught(issuer.issue('nowhere.example.com'));
  t.comment(`failed order: ${Date.now() - started} ms`);
  t.equal(err.kind, 'challenge');
  t.equal(err.problemType, 'urn:ietf:params:acme:error:connection');
  t.match(err.message, /nowhere\.example\.com.*could not resolve/);
  t.equal(err.retryAfterSeconds, undefined);
  t.ok(Date.now() - started < 10_000);
  t.equal(pebble.orders(), before + 1, 'the order was placed (the CA decides)');
  t.equal(keyAuthorizations.size, 0, 'challenge removed after the failed order');
});

t.test('a wrong key authorisation on the listener: challenge (unauthorized)', async (t) => {
  const lying: ChallengeStore = {
    set: (token, keyAuthorization) => challenges.set(token, `${keyAuthorization}x`),
    remove: (token) => challenges.remove(token),
  };
  const wrong = createAcmeIssuer({ directoryUrl: pebble.directoryUrl, email: null, accountKeys: memoryAccountKeys().store, challenges: lying, ca: pebble.caCertPem });
  const err = await caught(wrong.issue('wrong.example.com'));
  t.equal(err.kind, 'challenge');
  t.equal(err.problemType, 'urn:ietf:params:acme:error:unauthorized');
  t.equal(keyAuthorizations.size, 0);
});

t.test('a challenge store that fails is not blamed on the CA', async (t) => {
  const broken: ChallengeStore = { set: async () => { throw new Error('redis down'); }, remove: async () => {} };
  const failing = createAcmeIssuer({ directoryUrl: pebble.directoryUrl, email: null, accountKeys: memoryAccountKeys().store, challenges: broken, ca: pebble.caCertPem });
  const err = await failing.issue('shop.example.com').then(() => null, (e: unknown) => e);
  t.notOk(err instanceof IssueError);
  t.match(err, { message: /storing the HTTP-01 challenge for shop\.example\.com/, cause: { message: 'redis down' } });
});

t.test('pebble\'s listener is trusted only through `ca`; verification stays on', async (t) => {
  t.not(process.env.NODE_EXTRA_CA_CERTS, pebble.caCertFile, 'pebble is not trusted process-wide (the cert did not exist at start anyway)');
  const untrusting = createAcmeIssuer({ directoryUrl: pebble.directoryUrl, email: null, accountKeys: memoryAccountKeys().store, challenges });
  const err = await caught(untrusting.issue('shop.example.com'));
  t.equal(err.kind, 'ca');
  t.match(err.message, /self-signed certificate/);
});

t.test('a CA that is down fails at once (no in-client retries) as kind ca', async (t) => {
  const closed = http.createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const { port } = closed.address() as { port: number };
  await new Promise((resolve) => closed.close(resolve));
  const down = createAcmeIssuer({ directoryUrl: `https://127.0.0.1:${port}/dir`, email: null, accountKeys: memoryAccountKeys().store, challenges, ca: pebble.caCertPem });
  const started = Date.now();
  const err = await caught(down.issue('shop.example.com'));
  t.equal(err.kind, 'ca');
  t.match(err.message, /ECONNREFUSED/);
  t.ok(Date.now() - started < 2000, 'acme-client alone would retry for 75 s');
});

t.test('problem types map to kinds; anything else is the CA\'s', async (t) => {
  const kinds = Object.fromEntries(['dns', 'caa', 'connection', 'unauthorized', 'incorrectResponse', 'tls', 'rateLimited', 'malformed', 'serverInternal', 'toString']
    .map((name) => [name, problemKind(`urn:ietf:params:acme:error:${name}`)]));
  t.same(kinds, {
    dns: 'dns', caa: 'caa', connection: 'challenge', unauthorized: 'challenge', incorrectResponse: 'challenge', tls: 'challenge',
    rateLimited: 'rate_limit', malformed: 'ca', serverInternal: 'ca', toString: 'ca',
  });
  t.equal(problemKind('about:blank'), 'ca');
});
