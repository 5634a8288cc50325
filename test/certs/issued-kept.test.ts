// A certificate the CA issues while the shared state refuses writes is kept in hand and stored when
// writes come back: not thrown away and ordered again (CAs count duplicates). Real Portico on a real
// redis-server, real pebble and challtestsrv; Redis refuses writes the way a primary set to
// `min-replicas-to-write` does when its replicas are gone (-NOREPLICAS), from the moment the order's
// challenge is in Redis until three seconds later.
import t from 'tap';
import { Redis } from 'ioredis';
import { startPortico } from '../helpers/portico.ts';
import { startRedis } from '../helpers/redis.ts';
import { admin } from '../helpers/client.ts';
import { servedTrusted, startAcmePeers } from '../helpers/acme-peers.ts';

const { dns, upstream, pebble, env: acmeEnv } = await startAcmePeers(t);
const redis = await startRedis();
t.teardown(() => redis.stop());
const watcher = new Redis(redis.url);
t.teardown(() => watcher.disconnect());

const portico = await startPortico({
  ...acmeEnv,
  PORTICO_REDIS_URL: redis.url,
});
t.teardown(() => portico.stop());

const refusedWrites = async () => Number(/errorstat_NOREPLICAS:count=(\d+)/.exec(await watcher.info('errorstats'))?.[1] ?? 0);

t.test('writes refused while the CA issues: the certificate is stored once they come back, from one order', async (t) => {
  const owner = (await admin(portico.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const project = (await admin(portico.ports.admin, 'POST', '/admin/projects', { accountId: owner.id, name: 'kept', upstream: upstream.url })).json;
  await admin(portico.ports.admin, 'POST', `/admin/projects/${project.id}/domains`, { hostname: 'kept.example.com' });
  await dns.setCname('kept.example.com', 'edge.localhost');
  const before = pebble.orders();
  t.equal((await admin(portico.ports.admin, 'POST', `/admin/projects/${project.id}/domains/kept.example.com/verify`)).json.status, 'verified', 'the domain verifies');

  // the order's HTTP-01 token is in Redis: the CA is about to validate it, then Portico finalises the
  // order, downloads the certificate and stores it. Writes are refused from now on (reads still work,
  // so the CA's validation is answered).
  for (const deadline = Date.now() + 15_000; (await watcher.keys('portico:challenge:*')).length === 0; ) {
    if (Date.now() > deadline) throw new Error(`no challenge in Redis\n${portico.logs.slice(-30).join('\n')}`);
    await new Promise((r) => setTimeout(r, 2));
  }
  await watcher.config('SET', 'min-replicas-to-write', '1');
  const refusedBefore = await refusedWrites();
  await new Promise((r) => setTimeout(r, 3000));
  const refused = (await refusedWrites()) - refusedBefore;
  await watcher.config('SET', 'min-replicas-to-write', '0');
  t.ok(refused > 0, `Redis refused writes while the order ran (${refused})`);
  t.equal(pebble.orders() - before, 1, 'the order was placed meanwhile');

  let certificate: { status?: string } | undefined;
  for (const deadline = Date.now() + 10_000; certificate?.status !== 'issued' && Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
    const detail = (await admin(portico.ports.admin, 'GET', `/admin/projects/${project.id}`)).json;
    certificate = detail.domains.find((d: { hostname: string }) => d.hostname === 'kept.example.com')?.certificate;
  }
  t.match(certificate, { status: 'issued', issuer: String }, 'the domain shows the certificate issued once writes are back');
  t.equal(pebble.orders() - before, 1, 'from the one order');
  t.match(portico.logs.join('\n'), /certificate issued, but the state cannot be written/, 'the wait is logged');
  const events = (await admin(portico.ports.admin, 'GET', `/admin/projects/${project.id}/domains/kept.example.com/events`)).json as Array<{ type: string }>;
  t.equal(events.filter((e) => e.type === 'certificate_issued').length, 1, 'once on the timeline');

  t.ok(await servedTrusted(portico.ports.https, 'kept.example.com', await pebble.rootPem()), 'and serves it for that name');
});
