// An order cut short by kill -9 leaves its domain's certificate `pending` with nothing scheduled to
// finish it. The restarted instance's automatic DNS check of the verified domain starts the order
// again, without waiting for a visitor's handshake. Real Portico processes on one data dir, real
// pebble and challtestsrv; verified domains are checked every second here.
import t from 'tap';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { spawnPortico, tempDir, type Child } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';
import { servedTrusted, startAcmePeers } from '../helpers/acme-peers.ts';

const { dns, upstream, pebble, env } = await startAcmePeers(t);
const dirs = { PORTICO_DATA_DIR: tempDir('data'), PORTICO_CERTS_DIR: tempDir('certs') };
const settings = { ...env, ...dirs, PORTICO_VERIFIED_RECHECK_MS: '1000' };
const running: Child[] = [];
t.teardown(() => Promise.all(running.map((child) => child.kill('SIGKILL'))));
const start = async () => {
  const child = await spawnPortico(settings);
  running.push(child);
  return child;
};

async function certificateOf(port: number, projectId: string, hostname: string) {
  const project = (await admin(port, 'GET', `/admin/projects/${projectId}`)).json;
  return project.domains.find((d: { hostname: string }) => d.hostname === hostname)?.certificate as { status: string; issuer?: string } | undefined;
}

t.test('killed mid-order: after the restart the domain gets its certificate from an automatic check', async (t) => {
  const first = await start();
  const owner = (await admin(first.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const project = (await admin(first.ports.admin, 'POST', '/admin/projects', { accountId: owner.id, name: 'cut', upstream: upstream.url })).json;
  await admin(first.ports.admin, 'POST', `/admin/projects/${project.id}/domains`, { hostname: 'cut.example.com' });
  await dns.setCname('cut.example.com', 'edge.localhost');
  const before = pebble.orders();
  t.equal((await admin(first.ports.admin, 'POST', `/admin/projects/${project.id}/domains/cut.example.com/verify`)).json.status, 'verified', 'the domain verifies');
  // the CA has the order: kill the instance before it can finish it
  for (const deadline = Date.now() + 15_000; pebble.orders() === before; await new Promise((r) => setTimeout(r, 2))) {
    if (Date.now() > deadline) throw new Error(`no order reached pebble\n${first.logs.slice(-20).join('\n')}`);
  }
  await first.kill('SIGKILL');
  t.notOk(existsSync(path.join(dirs.PORTICO_CERTS_DIR, 'live', 'cut.example.com')), 'no certificate was stored before the kill');

  const second = await start();
  let certificate = await certificateOf(second.ports.admin, project.id, 'cut.example.com');
  t.match(certificate, { status: /^(pending|issued)$/ }, `the order was left ${certificate?.status}`);
  for (const deadline = Date.now() + 15_000; certificate?.status !== 'issued' && Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
    certificate = await certificateOf(second.ports.admin, project.id, 'cut.example.com');
  }
  t.match(certificate, { status: 'issued', issuer: String }, 'issued after the restart, with no handshake for the name');
  t.equal(pebble.orders() - before, 2, 'from a second order: the one cut short and this one');

  t.ok(await servedTrusted(second.ports.https, 'cut.example.com', await pebble.rootPem()), 'and served for that name');
});
