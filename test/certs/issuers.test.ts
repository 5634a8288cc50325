// Several issuers, end to end: two real pebbles side by side sharing one challtestsrv. An order the
// first CA refuses (rejectedIdentifier via domainBlocklist), cannot complete (unreachable) or may not
// take (CAA names another CA) is placed at the next; the certificate, the domain's `issuer` and its
// timeline say which CA issued it. CAA that pins the CA to Portico's own account there (RFC 8657
// `accounturi`) verifies and issues; pinned to another account, it is explained.
import t from 'tap';
import tls from 'node:tls';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { X509Certificate } from 'node:crypto';
import { startPortico, tempDir, type Instance } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startPebble } from '../helpers/pebble.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { freePort } from '../helpers/free-port.ts';
import { admin } from '../helpers/client.ts';
import https from 'node:https';
import * as acme from 'acme-client';
import { openFileCertStores } from '../../src/certs/file-store.ts';

const dns = await startChalltestsrv();
t.teardown(() => dns.stop());
const upstream = await startUpstream();
t.teardown(() => upstream.stop());
const httpPort = await freePort();
const first = await startPebble({ httpPort, dnsServer: dns.dnsServer, domainBlocklist: ['refused.example.com'] });
t.teardown(() => first.stop());
const second = await startPebble({ httpPort, dnsServer: dns.dnsServer });
t.teardown(() => second.stop());
await dns.addA('edge.localhost', ['127.0.0.1']);
// one trust file holding both pebbles' listener certificates
const dir = tempDir('issuers');
const trust = path.join(dir, 'pebbles.pem');
writeFileSync(trust, first.caCertPem + second.caCertPem);
const env = { PORTICO_HTTP_PORT: String(httpPort), PORTICO_DNS_SERVERS: dns.dnsServer, NODE_EXTRA_CA_CERTS: trust };

/** The CN of each pebble's issuing intermediate: what a leaf it signed names as its issuer. */
const cnOf = async (pem: Promise<string>) => new X509Certificate(await pem).subject.split('\n').find((l) => l.startsWith('CN='))!.slice(3);
const firstName = await cnOf(first.intermediatePem());
const secondName = await cnOf(second.intermediatePem());
t.not(firstName, secondName, 'the two CAs are told apart by their intermediates');

function served(port: number, servername: string, ca: string): Promise<X509Certificate> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, servername, ca, ALPNProtocols: ['http/1.1'] }, () => {
      resolve(socket.getPeerX509Certificate()!);
      socket.end();
    });
    socket.on('error', reject);
  });
}

async function setUp(instance: Instance, name: string) {
  const account = (await admin(instance.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  return (await admin(instance.ports.admin, 'POST', '/admin/projects', { accountId: account.id, name, upstream: upstream.url })).json as { id: string };
}

async function verifiedDomain(instance: Instance, projectId: string, hostname: string) {
  await admin(instance.ports.admin, 'POST', `/admin/projects/${projectId}/domains`, { hostname });
  await dns.setCname(hostname, 'edge.localhost');
  return (await admin(instance.ports.admin, 'POST', `/admin/projects/${projectId}/domains/${hostname}/verify`)).json;
}

async function issued(instance: Instance, projectId: string, hostname: string) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const domain = (await admin(instance.ports.admin, 'GET', `/admin/projects/${projectId}/domains/${hostname}`)).json;
    if (domain?.certificate?.status === 'issued') return domain.certificate;
    if (Date.now() > deadline) throw new Error(`${hostname}: ${JSON.stringify(domain?.certificate)}\n${instance.logs.slice(-10).join('\n')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const events = async (instance: Instance, projectId: string, hostname: string) =>
  (await admin(instance.ports.admin, 'GET', `/admin/projects/${projectId}/domains/${hostname}/events`)).json as Array<{ type: string; message: string; details?: Record<string, unknown> }>;

t.test('the first CA refuses the name: the second issues, and the domain and its timeline say so', async (t) => {
  const portico = await startPortico({ ...env, PORTICO_ACME_DIRECTORY: `${first.directoryUrl},${second.directoryUrl}` });
  t.teardown(() => portico.stop());
  const project = await setUp(portico, 'fallback');
  const before = [first.orders(), second.orders()];

  t.equal((await verifiedDomain(portico, project.id, 'refused.example.com')).status, 'verified');
  const certificate = await issued(portico, project.id, 'refused.example.com');
  t.equal(certificate.issuer, secondName, 'certificate.issuer is the second CA as the leaf names it');
  t.same([first.orders() - before[0], second.orders() - before[1]], [0, 1], 'the first CA refused before making an order; the second made one');
  const leaf = await served(portico.ports.https, 'refused.example.com', await second.rootPem());
  t.match(leaf.subjectAltName, /DNS:refused\.example\.com/, 'served over TLS for that SNI, chained to the second CA');
  t.match(leaf.issuer, new RegExp(secondName));

  const timeline = await events(portico, project.id, 'refused.example.com');
  const failed = timeline.find((e) => e.type === 'order_failed');
  t.match(failed?.details, { directory: first.directoryUrl, problemType: 'urn:ietf:params:acme:error:rejectedIdentifier' }, 'the refusal, with the CA and its problem type');
  t.match(failed?.message, /Trying 127\.0\.0\.1:\d+ next/);
  t.match(timeline.find((e) => e.type === 'order_placed')?.details, { directory: second.directoryUrl });
  t.match(timeline.find((e) => e.type === 'certificate_issued')?.details, { directory: second.directoryUrl, issuer: secondName });
  const order = timeline.map((e) => e.type).filter((type) => ['order_failed', 'order_placed', 'challenge_served', 'certificate_issued'].includes(type));
  t.same(order, ['order_failed', 'order_placed', 'challenge_served', 'certificate_issued'], 'in the order they happened');

  const other = await verifiedDomain(portico, project.id, 'plain.example.com');
  t.equal(other.status, 'verified');
  t.equal((await issued(portico, project.id, 'plain.example.com')).issuer, firstName, 'a name the first CA accepts is issued by the first');
  t.equal(second.orders() - before[1], 1, 'and never reaches the second');
});

t.test('the first CA cannot be reached: the second issues', async (t) => {
  const portico = await startPortico({ ...env, PORTICO_ACME_DIRECTORY: `https://127.0.0.1:${await freePort()}/dir,${second.directoryUrl}` });
  t.teardown(() => portico.stop());
  const project = await setUp(portico, 'down');
  await verifiedDomain(portico, project.id, 'down.example.com');
  t.equal((await issued(portico, project.id, 'down.example.com')).issuer, secondName);
  const failed = (await events(portico, project.id, 'down.example.com')).find((e) => e.type === 'order_failed');
  t.match(failed, { details: { kind: 'ca' }, message: /could not reach|ECONNREFUSED/ });
});

t.test('CAA names the second CA only: verification passes, the first is not asked, the second issues', async (t) => {
  const configFile = path.join(dir, 'portico.yaml');
  const base = readFileSync(path.resolve(import.meta.dirname, '../../config/portico.yaml'), 'utf8');
  writeFileSync(configFile, base.replace(/^ {2}issuers: null$/m, `  issuers: [{directory: "${first.directoryUrl}", name: ca-one, caa: [ca-one.test]}, {directory: "${second.directoryUrl}", name: ca-two, caa: [ca-two.test]}]`));
  const portico = await startPortico({ ...env, PORTICO_CONFIG: configFile, PORTICO_ACME_DIRECTORY: `${first.directoryUrl},${second.directoryUrl}` });
  t.teardown(() => portico.stop());
  const project = await setUp(portico, 'caa');
  // CAA at the parent: the hostname itself is a CNAME, whose CAA lookup follows the CNAME (RFC 8659 §3)
  await dns.addCaa('allowed.example', [{ tag: 'issue', value: 'ca-two.test' }]);
  const before = [first.orders(), second.orders()];
  t.equal((await verifiedDomain(portico, project.id, 'www.allowed.example')).status, 'verified', 'CAA allows one of the issuers');
  t.equal((await issued(portico, project.id, 'www.allowed.example')).issuer, secondName);
  t.same([first.orders() - before[0], second.orders() - before[1]], [0, 1], 'no order at the CA that CAA does not allow');
  const failed = (await events(portico, project.id, 'www.allowed.example')).find((e) => e.type === 'order_failed');
  t.match(failed, { details: { issuer: 'ca-one', kind: 'caa' }, message: /ca-one\.test/ });

  await dns.addCaa('blocked.example', [{ tag: 'issue', value: 'someone-else.test' }]);
  const blocked = await verifiedDomain(portico, project.id, 'www.blocked.example');
  t.not(blocked.status, 'verified', 'CAA that allows none of the issuers blocks verification');
  t.match(blocked.diagnostics, [{ code: 'caa_blocks_ca', expected: '0 issue "ca-one.test"' }]);
  t.same([first.orders() - before[0], second.orders() - before[1]], [0, 1], 'and no order anywhere');
});

t.test("CAA accounturi: pinned to Portico's account at the CA, the domain verifies and is issued; to another account, it is explained", async (t) => {
  const configFile = path.join(dir, 'portico-accounturi.yaml');
  const base = readFileSync(path.resolve(import.meta.dirname, '../../config/portico.yaml'), 'utf8');
  writeFileSync(configFile, base.replace(/^ {2}issuers: null$/m, `  issuers: [{directory: "${second.directoryUrl}", name: ca-two, caa: [ca-two.test]}]`));
  const portico = await startPortico({ ...env, PORTICO_CONFIG: configFile, PORTICO_ACME_DIRECTORY: second.directoryUrl });
  t.teardown(() => portico.stop());
  const project = await setUp(portico, 'pinned');

  // another account: Portico looks its own up at the CA (registering it, as a first order would) and says it is not that one
  await dns.addCaa('pinned-other.example', [{ tag: 'issue', value: `ca-two.test; accounturi=${second.directoryUrl.replace(/\/dir(ectory)?$/, '')}/my-account/999999` }]);
  const other = await verifiedDomain(portico, project.id, 'www.pinned-other.example');
  t.not(other.status, 'verified', 'pinned to another account: not verified');
  t.match(other.diagnostics, [{ code: 'caa_blocks_ca', message: /only for the ACME account .*my-account\/999999, which is not Portico's account there/ }]);

  // Portico's account, as the CA itself tells it for the key Portico keeps
  const accountKey = await openFileCertStores(portico.certsDir, second.directoryUrl).accountKey.load();
  t.ok(accountKey, 'the account key is kept');
  acme.axios.defaults.httpsAgent = new https.Agent({ ca: [...tls.rootCertificates, second.caCertPem] });
  const client = new acme.Client({ directoryUrl: second.directoryUrl, accountKey: accountKey! });
  await client.createAccount({ onlyReturnExisting: true });
  const ours = client.getAccountUrl();
  t.match(ours, /^https:\/\/.+\/my-account\/[0-9a-f]+$/, `the CA knows the account (${ours})`);

  await dns.addCaa('pinned.example', [{ tag: 'issue', value: `ca-two.test; accounturi=${ours}` }]);
  const before = second.orders();
  const pinned = await verifiedDomain(portico, project.id, 'www.pinned.example');
  t.equal(pinned.status, 'verified', `pinned to Portico's account: verified (${JSON.stringify(pinned.diagnostics)})`);
  t.equal((await issued(portico, project.id, 'www.pinned.example')).issuer, secondName, 'and issued: the order side allows it too');
  t.equal(second.orders() - before, 1, 'one order');
  t.notOk((await events(portico, project.id, 'www.pinned.example')).some((e) => e.type === 'order_failed'), 'with no CAA refusal on the way');
});
