// CA limits end to end against a real pebble with PORTICO_ACME_NEW_ORDERS_PER_3H=3: six domains verify,
// pebble logs exactly three orders, the other three wait in verification order (queued, queuePosition,
// nextAttemptAt, certificate_queued) — across a restart (nothing lost, nothing ordered twice) and
// across two instances sharing one Redis (one budget for both).
import t from 'tap';
import { startPortico, type Instance } from '../helpers/portico.ts';
import { startRedis } from '../helpers/redis.ts';
import { admin } from '../helpers/client.ts';
import { startAcmePeers } from '../helpers/acme-peers.ts';

const { dns, upstream, pebble, env: acmeEnv } = await startAcmePeers(t);
const env = {
  ...acmeEnv,
  PORTICO_ACME_NEW_ORDERS_PER_3H: '3',
};

interface Certificate { status: string; queuePosition?: number; nextAttemptAt?: string; issuer?: string }

async function project(instance: Instance, name: string): Promise<string> {
  const account = (await admin(instance.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  return (await admin(instance.ports.admin, 'POST', '/admin/projects', { accountId: account.id, name, upstream: upstream.url })).json.id;
}

async function verify(instance: Instance, projectId: string, hostname: string): Promise<void> {
  await admin(instance.ports.admin, 'POST', `/admin/projects/${projectId}/domains`, { hostname });
  await dns.setCname(hostname, 'edge.localhost');
  const domain = (await admin(instance.ports.admin, 'POST', `/admin/projects/${projectId}/domains/${hostname}/verify`)).json;
  if (domain.status !== 'verified') throw new Error(`${hostname} did not verify: ${JSON.stringify(domain.diagnostics)}`);
}

const certificateOf = async (instance: Instance, projectId: string, hostname: string): Promise<Certificate> =>
  (await admin(instance.ports.admin, 'GET', `/admin/projects/${projectId}/domains/${hostname}`)).json.certificate;

/** Waits until none of the hostnames has an order in flight (each issued or queued). */
async function settled(instance: Instance, projectId: string, hostnames: string[]): Promise<Certificate[]> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const all = await Promise.all(hostnames.map((h) => certificateOf(instance, projectId, h)));
    if (all.every((c) => c.status === 'issued' || (c.status === 'queued' && c.queuePosition !== undefined))) return all;
    if (Date.now() > deadline) throw new Error(`not settled: ${JSON.stringify(all)}\n${instance.logs.slice(-5).join('\n')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const metric = (text: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);

t.test('six domains, three orders allowed: three issued, three queued in verification order; a restart keeps the queue and the budget', async (t) => {
  const portico = await startPortico(env);
  let stopped = false;
  t.teardown(() => (stopped ? undefined : portico.stop()));
  const projectId = await project(portico, 'queue');
  const hostnames = ['q1', 'q2', 'q3', 'q4', 'q5', 'q6'].map((label) => `${label}.example.com`);
  const before = pebble.orders();
  for (const hostname of hostnames) await verify(portico, projectId, hostname);
  const states = await settled(portico, projectId, hostnames);
  t.equal(pebble.orders() - before, 3, 'pebble logged exactly 3 orders');
  t.same(states.map((c) => c.status), ['issued', 'issued', 'issued', 'queued', 'queued', 'queued']);
  t.same(states.slice(3).map((c) => c.queuePosition), [1, 2, 3], 'in verification order');
  const waits = states.slice(3).map((c) => (Date.parse(c.nextAttemptAt!) - Date.now()) / 3_600_000);
  t.ok(waits[0] > 0.9 && waits[0] <= 1, `the first waits about 1 h for the bucket to refill (${waits[0].toFixed(2)} h)`);
  t.ok(waits[1] > waits[0] && waits[2] > waits[1], `each place one refill later (${waits.map((w) => w.toFixed(2)).join(', ')} h)`);
  const timeline = (await admin(portico.ports.admin, 'GET', `/admin/projects/${projectId}/domains/q4.example.com/events`)).json as Array<{ type: string; message: string }>;
  const queued = timeline.find((e) => e.type === 'certificate_queued');
  t.match(queued?.message, /place 1.*new orders per account/, 'the timeline says why it waits');
  t.notOk(timeline.some((e) => e.type === 'order_placed'), 'and that no order was placed for it');

  // the gauges are refreshed by the maintenance pass that runs at start: restart, then read them
  await portico.stop();
  stopped = true;
  const again = await startPortico({ ...env, PORTICO_DATA_DIR: portico.dataDir, PORTICO_CERTS_DIR: portico.certsDir });
  t.teardown(() => again.stop());
  const after = await settled(again, projectId, hostnames);
  t.same(after.map((c) => [c.status, c.queuePosition]), states.map((c) => [c.status, c.queuePosition]), 'the queue is the same after a restart');
  let text = '';
  for (let i = 0; i < 50 && !/^portico_acme_limit_remaining/m.test(text); i++) {
    await new Promise((r) => setTimeout(r, 100));
    text = (await admin(again.ports.admin, 'GET', '/metrics')).text;
  }
  t.equal(metric(text, 'portico_acme_queue_depth'), 3);
  t.match(text, /^portico_acme_limit_remaining\{issuer="127\.0\.0\.1:\d+",limit="new_orders"\} 0$/m, 'no new order left (the budget survived the restart)');
  await verify(again, projectId, 'q7.example.com');
  t.match((await settled(again, projectId, ['q7.example.com']))[0], { status: 'queued', queuePosition: 4 }, 'a later domain waits behind');
  t.equal(pebble.orders() - before, 3, 'still 3 orders: nothing ordered twice, nothing overtaking the queue');
});

t.test('two instances on one Redis share one budget', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const shared = { ...env, PORTICO_REDIS_URL: redis.url };
  const a = await startPortico(shared);
  t.teardown(() => a.stop());
  const b = await startPortico({ ...shared, PORTICO_HTTP_PORT: '0' });
  t.teardown(() => b.stop());
  const projectId = await project(a, 'shared');
  const hostnames = ['r1', 'r2', 'r3', 'r4', 'r5', 'r6'].map((label) => `${label}.example.net`);
  const before = pebble.orders();
  await Promise.all(hostnames.map((hostname, i) => verify(i % 2 === 0 ? a : b, projectId, hostname)));
  const states = await settled(a, projectId, hostnames);
  t.equal(pebble.orders() - before, 3, 'pebble logged exactly 3 orders across both instances');
  t.equal(states.filter((c) => c.status === 'issued').length, 3);
  const line = states.filter((c) => c.status === 'queued').sort((x, y) => x.queuePosition! - y.queuePosition!);
  t.same(line.map((c) => c.queuePosition), [1, 2, 3]);
  const waits = line.map((c) => (Date.parse(c.nextAttemptAt!) - Date.now()) / 3_600_000);
  t.ok(waits[0] > 0.9 && waits[0] <= 1 && waits[1] > waits[0] && waits[2] > waits[1], `each place's turn from the shared budget, whichever instance queued it (${waits.map((w) => w.toFixed(2)).join(', ')} h)`);
  const fromB = await Promise.all(hostnames.map((h) => certificateOf(b, projectId, h)));
  t.same(fromB.map((c) => c.status), states.map((c) => c.status), 'both instances show the same queue');
});
