// Certificates end to end: a domain verifies → Portico orders from a real ACME CA (pebble), answers
// the HTTP-01 challenge on its HTTP listener, and serves the chain for that SNI.
import t from 'tap';
import tls from 'node:tls';
import { X509Certificate } from 'node:crypto';
import { startPortico, type Instance } from '../helpers/portico.ts';
import { startRedis } from '../helpers/redis.ts';
import { admin } from '../helpers/client.ts';
import { startAcmePeers } from '../helpers/acme-peers.ts';

const { dns, upstream, pebble, env } = await startAcmePeers(t);

/**
 * The certificate served for `servername`. Rejects unless its chain verifies against `ca` and it
 * names `identity` (the servername, or `localhost` where the fallback certificate is expected).
 */
function handshake(port: number, servername: string, ca: string, identity = servername): Promise<{ leaf: X509Certificate; authorized: boolean }> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect(
      { host: '127.0.0.1', port, servername, ca, ALPNProtocols: ['http/1.1'], checkServerIdentity: (_host, cert) => tls.checkServerIdentity(identity, cert) },
      () => {
        resolve({ leaf: socket.getPeerX509Certificate()!, authorized: socket.authorized });
        socket.end();
      },
    );
    socket.on('error', reject);
  });
}

/** How many of these handshakes got a certificate that verifies (the others got the fallback). */
async function verified(attempts: Array<Promise<unknown>>): Promise<number> {
  return (await Promise.allSettled(attempts)).filter((r) => r.status === 'fulfilled').length;
}

async function addVerifiedDomain(instance: Instance, projectId: string, hostname: string) {
  await admin(instance.ports.admin, 'POST', `/admin/projects/${projectId}/domains`, { hostname });
  await dns.setCname(hostname, 'edge.localhost');
  return (await admin(instance.ports.admin, 'POST', `/admin/projects/${projectId}/domains/${hostname}/verify`)).json;
}

async function certificateOf(instance: Instance, projectId: string, hostname: string, until: (c: { status: string }) => boolean, ms = 15_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const project = (await admin(instance.ports.admin, 'GET', `/admin/projects/${projectId}`)).json;
    const certificate = project.domains.find((d: { hostname: string }) => d.hostname === hostname)?.certificate;
    if (certificate && until(certificate)) return certificate;
    if (Date.now() > deadline) throw new Error(`certificate of ${hostname} stayed ${JSON.stringify(certificate)}\n${pebble.log().slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const portico = await startPortico(env);
t.teardown(() => portico.stop());
const account = (await admin(portico.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
const project = (await admin(portico.ports.admin, 'POST', '/admin/projects', { accountId: account.id, name: 'certs', upstream: upstream.url })).json;

t.test('verify → certificate issued and served for that SNI with a chain to the CA root', async (t) => {
  const before = pebble.orders();
  const domain = await addVerifiedDomain(portico, project.id, 'shop.example.com');
  t.equal(domain.status, 'verified');
  const certificate = await certificateOf(portico, project.id, 'shop.example.com', (c) => c.status === 'issued');
  t.match(certificate, { status: 'issued', issuer: String, notAfter: String });
  t.equal(pebble.orders() - before, 1, 'one order');
  const root = await pebble.rootPem();
  const served = await handshake(portico.ports.https, 'shop.example.com', root);
  t.ok(served.authorized, 'the served chain verifies against the CA root');
  t.match(served.leaf.subjectAltName, /DNS:shop\.example\.com/);
  t.equal(served.leaf.publicKey.asymmetricKeyDetails?.namedCurve, 'prime256v1', 'ECDSA P-256');
  t.equal(new Date(served.leaf.validTo).toISOString(), certificate.notAfter);
});

t.test('names nobody verified never reach the CA', async (t) => {
  const before = pebble.orders();
  await admin(portico.ports.admin, 'POST', `/admin/projects/${project.id}/domains`, { hostname: 'pending.example.com' });
  for (const servername of ['pending.example.com', 'unknown.example.org', 'certs.localhost', 'api.localhost']) {
    const served = await handshake(portico.ports.https, servername, portico.ca, 'localhost');
    t.match(served.leaf.subject, /Portico fallback/, `${servername}: the fallback certificate`);
  }
  t.equal(pebble.orders(), before, 'no ACME order at all');
});

t.test('concurrent handshakes for a fresh verified domain make one order', async (t) => {
  const before = pebble.orders();
  await addVerifiedDomain(portico, project.id, 'many.example.com');
  const root = await pebble.rootPem();
  const issued = await verified(Array.from({ length: 5 }, () => handshake(portico.ports.https, 'many.example.com', root)));
  t.ok(issued >= 1, `${issued} of 5 handshakes already got the issued certificate`);
  await certificateOf(portico, project.id, 'many.example.com', (c) => c.status === 'issued');
  t.equal(pebble.orders() - before, 1, 'one order for verify + 5 handshakes');
  t.ok((await handshake(portico.ports.https, 'many.example.com', root)).authorized);
});

t.test('a failing order backs off, shows why, and reverify tries again at once', async (t) => {
  await admin(portico.ports.admin, 'POST', `/admin/projects/${project.id}/domains`, { hostname: 'late.example.com' });
  // the owner's DNS verifies, but the name points at a host where no one answers the challenge
  await dns.setCname('late.example.com', 'edge.localhost');
  await dns.addA('late.example.com', ['127.0.0.2']);
  await dns.clearCname('late.example.com');
  await dns.setCname('late.example.com', 'edge-broken.localhost');
  const verified = (await admin(portico.ports.admin, 'POST', `/admin/projects/${project.id}/domains/late.example.com/verify`)).json;
  t.equal(verified.status, 'failed', 'wrong CNAME does not verify');
  await dns.setCname('late.example.com', 'edge.localhost');
  await dns.clearA('edge.localhost');
  const again = (await admin(portico.ports.admin, 'POST', `/admin/projects/${project.id}/domains/late.example.com/verify`)).json;
  t.equal(again.status, 'verified');
  const failed = await certificateOf(portico, project.id, 'late.example.com', (c) => c.status === 'failed');
  t.match(failed.lastError, /^challenge: /, 'classified');
  const wait = Date.parse(failed.nextAttemptAt) - Date.now();
  t.ok(wait > 30_000 && wait <= 60_000, `next attempt in about a minute (${Math.round(wait / 1000)} s)`);
  const before = pebble.orders();
  await handshake(portico.ports.https, 'late.example.com', portico.ca, 'localhost');
  t.equal(pebble.orders(), before, 'handshakes during the backoff place no order');
  await dns.addA('edge.localhost', ['127.0.0.1']);
  await admin(portico.ports.admin, 'POST', `/admin/projects/${project.id}/domains/late.example.com/reverify`);
  const issued = await certificateOf(portico, project.id, 'late.example.com', (c) => c.status === 'issued');
  t.equal(issued.lastError, undefined);
  t.equal(issued.nextAttemptAt, undefined);
});

t.test('a restart serves the stored certificate without a new order', async (t) => {
  await portico.stop();
  const again = await startPortico({ ...env, PORTICO_DATA_DIR: portico.dataDir, PORTICO_CERTS_DIR: portico.certsDir });
  t.teardown(() => again.stop());
  const before = pebble.orders();
  const served = await handshake(again.ports.https, 'shop.example.com', await pebble.rootPem());
  t.ok(served.authorized);
  t.equal(pebble.orders(), before);
  // the first maintenance pass reads the stored validities in the background after start-up
  let metrics = '';
  for (let i = 0; i < 40 && !/portico_certificates\{expires_in="ge30d"\} [1-9]/.test(metrics); i++) {
    await new Promise((r) => setTimeout(r, 50));
    metrics = (await admin(again.ports.admin, 'GET', '/metrics')).text;
  }
  t.match(metrics, /portico_certificates\{expires_in="ge30d"\} [1-9]/);
});

t.test('removing a domain drops its certificate at once', async (t) => {
  const again = await startPortico(env);
  t.teardown(() => again.stop());
  const owner = (await admin(again.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const p = (await admin(again.ports.admin, 'POST', '/admin/projects', { accountId: owner.id, name: 'gone', upstream: upstream.url })).json;
  await dns.addA('edge.localhost', ['127.0.0.1']);
  await addVerifiedDomain(again, p.id, 'gone.example.com');
  await certificateOf(again, p.id, 'gone.example.com', (c) => c.status === 'issued');
  const root = await pebble.rootPem();
  t.ok((await handshake(again.ports.https, 'gone.example.com', root)).authorized);
  await admin(again.ports.admin, 'DELETE', `/admin/projects/${p.id}/domains/gone.example.com`);
  t.match((await handshake(again.ports.https, 'gone.example.com', again.ca, 'localhost')).leaf.subject, /Portico fallback/);
});

t.test('two instances on one Redis: one order, either answers the challenge, both serve it, Redis down still serves', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const shared = { ...env, PORTICO_REDIS_URL: redis.url };
  // only A listens on the port the CA validates against; B must still get its orders validated
  const a = await startPortico(shared);
  t.teardown(() => a.stop());
  const b = await startPortico({ ...shared, PORTICO_HTTP_PORT: '0' });
  t.teardown(() => b.stop());
  const owner = (await admin(a.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const p = (await admin(a.ports.admin, 'POST', '/admin/projects', { accountId: owner.id, name: 'cluster', upstream: upstream.url })).json;
  await admin(a.ports.admin, 'POST', `/admin/projects/${p.id}/domains`, { hostname: 'both.example.com' });
  await dns.setCname('both.example.com', 'edge.localhost');
  const before = pebble.orders();
  // verify through B: B orders, the CA fetches the challenge from A
  t.equal((await admin(b.ports.admin, 'POST', `/admin/projects/${p.id}/domains/both.example.com/verify`)).json.status, 'verified');
  const root = await pebble.rootPem();
  const early = await verified([a, b, a, b].map((i) => handshake(i.ports.https, 'both.example.com', root)));
  await certificateOf(a, p.id, 'both.example.com', (c) => c.status === 'issued');
  t.equal(pebble.orders() - before, 1, `one order across two instances (${early} early handshakes got it)`);
  t.ok((await handshake(a.ports.https, 'both.example.com', root)).authorized, 'A serves it');
  t.ok((await handshake(b.ports.https, 'both.example.com', root)).authorized, 'B serves it');
  await redis.kill();
  t.ok((await handshake(b.ports.https, 'both.example.com', root)).authorized, 'with Redis down the certificate is still served');
});
