// Domains look after themselves (DESIGN §6), end to end with real pebble and challtestsrv: a domain
// added before its DNS exists verifies and gets its certificate with nobody pressing Verify; a
// verified domain whose DNS moves away becomes misconfigured after three failed checks, is still
// served, and recovers by itself; due times survive a restart; the timeline reads through the admin
// API and the CLI; two instances on one Redis run each check once.
import t from 'tap';
import tls from 'node:tls';
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { startPortico, tempDir, cleanup, ADMIN_TOKEN, type Instance } from '../helpers/portico.ts';
import { startRedis } from '../helpers/redis.ts';
import { admin, request } from '../helpers/client.ts';
import { startAcmePeers } from '../helpers/acme-peers.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const run = promisify(execFile);
const { dns, upstream, pebble, env: acmeEnv } = await startAcmePeers(t);
await dns.addA('elsewhere.example.net', ['192.0.2.10']);
const env = {
  ...acmeEnv,
  PORTICO_PENDING_RECHECK_MS: '300',
  PORTICO_VERIFIED_RECHECK_MS: '400',
};

type Domain = { hostname: string; status: string; health: string; nextCheckAt?: string; lastCheckedAt?: string; diagnostics: Array<{ code: string }>; certificate: { status: string; issuer?: string } };

const domainOf = async (instance: { ports: { admin: number } }, projectId: string, hostname: string): Promise<Domain> =>
  (await admin(instance.ports.admin, 'GET', `/admin/projects/${projectId}/domains/${hostname}`)).json;

/** polls the domain until `until` holds (bounded; the message says what it was last) */
async function waitFor(instance: { ports: { admin: number } }, projectId: string, hostname: string, until: (d: Domain) => boolean, ms = 20_000): Promise<Domain> {
  const deadline = Date.now() + ms;
  for (;;) {
    const domain = await domainOf(instance, projectId, hostname);
    if (until(domain)) return domain;
    if (Date.now() > deadline) throw new Error(`${hostname} stayed ${JSON.stringify(domain)}\n${pebble.log().slice(-1500)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const eventsOf = async (instance: Instance, projectId: string, hostname: string): Promise<Array<{ at: string; type: string; message: string; details?: Record<string, unknown> }>> =>
  (await admin(instance.ports.admin, 'GET', `/admin/projects/${projectId}/domains/${hostname}/events`)).json;

function cli(instance: Instance, ...args: string[]) {
  return run(path.join(ROOT, 'node_modules/.bin/node'), [path.join(ROOT, 'src/cli/main.ts'), ...args], {
    env: { ...process.env, PORTICO_ADMIN_URL: `http://127.0.0.1:${instance.ports.admin}`, PORTICO_ADMIN_TOKEN: ADMIN_TOKEN },
  }).catch((err: { code: number; stdout: string; stderr: string }) => ({ ...err, failed: true }));
}

function servedCertificate(port: number, servername: string, ca: string): Promise<{ authorized: boolean; subject: string }> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, servername, ca, ALPNProtocols: ['http/1.1'] }, () => {
      resolve({ authorized: socket.authorized, subject: socket.getPeerX509Certificate()!.subjectAltName ?? '' });
      socket.end();
    });
    socket.on('error', reject);
  });
}

const dataDir = tempDir('selfcare-data');
const certsDir = tempDir('selfcare-certs');
t.teardown(() => cleanup(dataDir, certsDir));
let portico = await startPortico({ ...env, PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir });
t.teardown(() => portico.stop());
const account = (await admin(portico.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
const project = (await admin(portico.ports.admin, 'POST', '/admin/projects', { accountId: account.id, name: 'selfcare', upstream: upstream.url })).json;

t.test('added before its DNS exists: verified and certified with nobody pressing Verify', async (t) => {
  const added = (await admin(portico.ports.admin, 'POST', `/admin/projects/${project.id}/domains`, { hostname: 'auto.example.com' })).json;
  t.equal(added.status, 'pending');
  t.ok(Date.parse(added.nextCheckAt) > Date.now(), 'nextCheckAt says when the first automatic check comes');
  // a few automatic checks find nothing yet
  const checked = await waitFor(portico, project.id, 'auto.example.com', (d) => d.lastCheckedAt !== undefined);
  t.match(checked, { status: 'pending', health: 'ok', diagnostics: [{ code: 'cname_missing' }] });
  const before = pebble.orders();
  await dns.setCname('auto.example.com', 'edge.localhost');
  const issued = await waitFor(portico, project.id, 'auto.example.com', (d) => d.certificate.status === 'issued');
  t.match(issued, { status: 'verified', health: 'ok', diagnostics: [] });
  t.equal(pebble.orders() - before, 1, 'one order');
  const served = await servedCertificate(portico.ports.https, 'auto.example.com', await pebble.rootPem());
  t.ok(served.authorized, 'the issued chain is served');
  const types = (await eventsOf(portico, project.id, 'auto.example.com')).map((e) => e.type);
  t.equal(types[0], 'added');
  t.ok(types.indexOf('dns_checked') < types.indexOf('verified'), 'DNS checks, then verified');
  t.ok(types.indexOf('verified') < types.indexOf('order_placed'), 'then the order');
  t.ok(types.indexOf('order_placed') < types.indexOf('certificate_issued'), 'then the certificate');

  const listed = await cli(portico, 'domains', 'events', project.id, 'auto.example.com');
  t.match(listed.stdout, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC {2}Added +Added to project selfcare\. Create these DNS records: CNAME auto → edge\.localhost/m, 'time, what happened, in plain words');
  t.match(listed.stdout, /UTC {2}Verified +DNS points at the platform/);
  t.match(listed.stdout, /UTC {2}Certificate issued +/);
});

t.test('DNS pointed elsewhere: misconfigured after three failed checks, still served, back to ok by itself', async (t) => {
  await dns.clearCname('auto.example.com');
  await dns.setCname('auto.example.com', 'elsewhere.example.net');
  const bad = await waitFor(portico, project.id, 'auto.example.com', (d) => d.health === 'misconfigured');
  t.match(bad, { status: 'verified', certificate: { status: 'issued' }, diagnostics: [{ code: 'cname_mismatch' }] });
  const events = await eventsOf(portico, project.id, 'auto.example.com');
  const last = events.findLastIndex((e) => e.type === 'misconfigured');
  const checks = events.slice(0, last).filter((e) => e.type === 'dns_checked').reverse();
  const failedChecks = checks.findIndex((e) => (e.details as { result: string }).result === 'pass');
  t.equal(failedChecks, 3, 'three failed checks in a row came first');
  const served = await request(portico.ports.https, 'auto.example.com', await pebble.rootPem(), { path: '/echo' });
  t.equal(served.status, 200, 'still served, with its certificate');
  const misconfigured = (await admin(portico.ports.admin, 'GET', `/admin/projects/${project.id}/domains?health=misconfigured`)).json;
  t.same(misconfigured.map((d: Domain) => d.hostname), ['auto.example.com']);
  const list = await cli(portico, 'domains', 'list', project.id, '--health', 'misconfigured');
  t.match(list.stdout, /^HOSTNAME +STATUS +HEALTH +CERTIFICATE +NEXT CHECK\nauto\.example\.com +verified +misconfigured +issued, until \d{4}/);

  await dns.clearCname('auto.example.com');
  await dns.setCname('auto.example.com', 'edge.localhost');
  const ok = await waitFor(portico, project.id, 'auto.example.com', (d) => d.health === 'ok');
  t.same(ok.diagnostics, []);
  t.ok((await eventsOf(portico, project.id, 'auto.example.com')).some((e) => e.type === 'recovered'));
  t.same((await admin(portico.ports.admin, 'GET', `/admin/projects/${project.id}/domains?health=misconfigured`)).json, []);
  t.equal((await admin(portico.ports.admin, 'GET', `/admin/projects/${project.id}/domains?health=sick`)).status, 400, 'an unknown filter value is refused');
});

t.test('due times survive a restart: DNS created while Portico is down verifies after it is back', async (t) => {
  await admin(portico.ports.admin, 'POST', `/admin/projects/${project.id}/domains`, { hostname: 'later.example.com' });
  const pending = await waitFor(portico, project.id, 'later.example.com', (d) => d.lastCheckedAt !== undefined);
  await portico.stop();
  await dns.setCname('later.example.com', 'edge.localhost');
  portico = await startPortico({ ...env, PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir });
  const verified = await waitFor(portico, project.id, 'later.example.com', (d) => d.status === 'verified');
  t.ok(Date.parse(verified.lastCheckedAt!) > Date.parse(pending.lastCheckedAt!), 'checked again after the restart');
  t.same((await admin(portico.ports.admin, 'GET', `/admin/projects/${project.id}/domains?status=pending`)).json, []);
});

t.test('import: each line reported, bad lines do not stop the rest', async (t) => {
  const dir = tempDir('import');
  t.teardown(() => cleanup(dir));
  const file = path.join(dir, 'domains.txt');
  writeFileSync(file, '# our shops\nshop1.example.com\n\nnot a hostname\nshop2.example.com  # the second\nauto.example.com\n');
  const result = await cli(portico, 'domains', 'import', project.id, file);
  t.equal((result as { code?: number }).code, 1, 'exit 1: a line failed');
  t.match(result.stdout, /line 2: shop1\.example\.com added \(pending\); create CNAME shop1 → edge\.localhost/);
  t.match(result.stdout, /line 4: not a hostname not added: 400 invalid_hostname/);
  t.match(result.stdout, /line 5: shop2\.example\.com added/);
  t.match(result.stdout, /line 6: auto\.example\.com not added: 409 conflict/);
  t.match(result.stdout, /2 added, 2 failed/);
  const pending = (await admin(portico.ports.admin, 'GET', `/admin/projects/${project.id}/domains?status=pending`)).json;
  t.same(pending.map((d: Domain) => d.hostname), ['shop1.example.com', 'shop2.example.com']);
  t.match((await cli(portico, 'domains', 'import', project.id, path.join(dir, 'missing.txt'))).stderr, /cannot read .*missing\.txt: ENOENT/);
});

t.test('removal ends the checks; the timeline keeps "removed" for the same account', async (t) => {
  await admin(portico.ports.admin, 'DELETE', `/admin/projects/${project.id}/domains/shop2.example.com`);
  t.equal((await admin(portico.ports.admin, 'GET', `/admin/projects/${project.id}/domains/shop2.example.com/events`)).status, 404);
  await admin(portico.ports.admin, 'POST', `/admin/projects/${project.id}/domains`, { hostname: 'shop2.example.com' });
  const types = (await eventsOf(portico, project.id, 'shop2.example.com')).map((e) => e.type);
  t.same(types.slice(-2), ['removed', 'added']);
});

t.test('two instances on one Redis: each check runs once', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  // the first instance keeps pebble's HTTP port; these two need no certificate
  const shared = { ...env, PORTICO_HTTP_PORT: '0', PORTICO_REDIS_URL: redis.url, PORTICO_VERIFIED_RECHECK_MS: '1000' };
  const a = await startPortico(shared);
  t.teardown(() => a.stop());
  const b = await startPortico(shared);
  t.teardown(() => b.stop());
  const owner = (await admin(a.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const shop = (await admin(a.ports.admin, 'POST', '/admin/projects', { accountId: owner.id, name: 'pair', upstream: upstream.url })).json;
  const hostnames = ['r1.example.com', 'r2.example.com', 'r3.example.com', 'r4.example.com'];
  for (const hostname of hostnames) {
    await dns.setCname(hostname, 'edge.localhost');
    await admin(a.ports.admin, 'POST', `/admin/projects/${shop.id}/domains`, { hostname });
  }
  for (const hostname of hostnames) await waitFor(b, shop.id, hostname, (d) => d.status === 'verified');
  // failed checks are each an event (a passing routine check is not): point DNS away and count them
  for (const hostname of hostnames) await dns.clearCname(hostname);
  await new Promise((r) => setTimeout(r, 4500));
  for (const hostname of hostnames) {
    const checks = (await eventsOf(b, shop.id, hostname)).filter((e) => e.type === 'dns_checked').map((e) => Date.parse(e.at));
    const gaps = checks.slice(1).map((at, i) => at - checks[i]);
    t.ok(checks.length >= 3, `${hostname}: checked ${checks.length} times`);
    t.same(gaps.filter((gap) => gap < 500), [], `${hostname}: no check ran twice (gaps ${gaps.join(', ')} ms)`);
  }
  const metrics = async (i: Instance) => (await admin(i.ports.admin, 'GET', '/metrics')).text;
  const total = (text: string) => [...text.matchAll(/^portico_domain_checks_total\{result="(\w+)"\} (\d+)/gm)].reduce((n, m) => n + Number(m[2]), 0);
  // which instance runs a check is whichever claims it first; together they counted every check
  t.ok(total(await metrics(a)) + total(await metrics(b)) >= 3 * hostnames.length, 'portico_domain_checks_total counts the checks');
});
