// Two real Portico processes on a real Sentinel topology (DESIGN §8; TOOLCHAIN "Redis topologies"): a
// primary, two replicas, three sentinels with down-after 1000 ms. Under parallel traffic from both
// instances the primary is killed with SIGKILL: writes answer 503 with Retry-After meanwhile (never a
// 500), work again on both instances without a restart, nothing acknowledged is lost and the quota
// is exact again. Then every Redis is stopped: reads keep answering, a revocation holds.
import t from 'tap';
import { spawnPortico, cleanup, type Child } from '../helpers/portico.ts';
import { api, admin, accountWithKey } from '../helpers/client.ts';
import { cli, startSentinel } from '../helpers/redis-topology.ts';
import { roomInMinute } from '../helpers/minute.ts';
import { checkAnswered, checkKept, checkNoRelapse, checkPlannedSwitchover, startTraffic } from '../helpers/failover-traffic.ts';
import { parseExposition, scrape, sum } from '../helpers/prometheus.ts';

const topology = await startSentinel();
t.teardown(() => topology.stop());

const spawn = async (): Promise<Child> => {
  // one worker: each instance is one process with one cache, so what it has answered is known
  const child = await spawnPortico({ PORTICO_REDIS_URL: topology.url }, ['--workers', '1']);
  t.teardown(async () => {
    await child.kill('SIGKILL');
    cleanup(child.env.PORTICO_DATA_DIR, child.env.PORTICO_CERTS_DIR);
  });
  return child;
};
const [a, b] = await Promise.all([spawn(), spawn()]);
const on = (instance: Child, key: string, options: Parameters<typeof api>[3] = {}) => api(instance.ports.https, instance.ca, key, options);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

t.test('both instances run on Sentinel and say so', async (t) => {
  for (const instance of [a, b]) {
    const ready = await admin(instance.ports.admin, 'GET', '/readyz');
    t.equal(ready.status, 200);
    t.match(ready.json, { redis: 'ok', mode: 'sentinel' });
  }
});

t.test('a planned switchover (SENTINEL FAILOVER) under traffic: writes refused only while the replica takes over, none lost', async (t) => {
  // what an operator does for maintenance: the primary stays up and is made a replica
  const { key } = await accountWithKey(a.ports.admin, 'enterprise', 'production', { perMinute: 1_000_000, perDay: 10_000_000 });
  const traffic = startTraffic([a, b], key, { label: 'switchover' });
  await sleep(1000);
  const before = await topology.primary();
  traffic.markFailover();
  await cli(topology.sentinels[0].port, 'SENTINEL', 'FAILOVER', topology.name);
  // the command answers at once; the sentinels promote the replica a second or two later
  for (let i = 0; i < 300 && (await topology.primary()).port === before.port; i++) await sleep(50);
  await topology.settled();
  await traffic.recovered();
  await sleep(1000);
  const report = await traffic.stop();
  const after = await topology.primary();
  t.not(after.port, before.port, 'a replica was promoted');
  checkPlannedSwitchover(t, report, [a, b]);
  // an operator reads it in the log: every sentinel heard, the fence, the new primary (once, not per sentinel)
  for (const instance of [a, b]) {
    const told = (message: string) => instance.logs.filter((line) => line.includes(message));
    const listened = told('listening to the sentinels\' failover events')[0] ?? '';
    t.ok(topology.sentinels.every((s) => listened.includes(`:${s.port}"`)), `every sentinel listened to is logged (${listened.slice(0, 300)})`);
    t.equal(told('Sentinel failover under way').filter((line) => line.includes(`:${before.port}`)).length, 1, 'the fenced primary is logged once');
    t.equal(told('Sentinel failover: following the new primary').filter((line) => line.includes(`:${after.port}`)).length, 1, 'the new primary is logged once');
  }
  await checkKept(t, [a, b], key, report);
});

t.test('a kill -9 of the primary under traffic: 503 meanwhile, then writes again, nothing acknowledged lost', async (t) => {
  const { key } = await accountWithKey(a.ports.admin, 'enterprise', 'production', { perMinute: 1_000_000, perDay: 10_000_000 });
  const traffic = startTraffic([a, b], key, { label: 'sentinel' });
  await sleep(1500);
  const primary = await topology.primary();
  traffic.markFailover();
  await primary.kill();
  await traffic.recovered();
  // the sentinels that did not name the new primary yet announce it (+switch-master) as they learn of
  // it, up to seconds later: traffic goes on through every announcement
  await topology.settled();
  await sleep(500);
  const report = await traffic.stop();
  const newPrimary = await topology.primary();
  t.not(newPrimary.port, primary.port, 'the sentinels promoted a replica');

  t.comment(`answers by status: ${JSON.stringify(report.byStatus)}; no answer: ${report.noAnswer}; longest request ${Math.round(report.longestMs)} ms`);
  t.comment(`writes failed from the first failure to the first success after the last one: ${report.instances.map((r) => (r.firstFailureMs === null ? 'never' : r.recoveredMs === null ? 'not recovered' : `${Math.round(r.recoveredMs - r.firstFailureMs)} ms`)).join(', ')}`);
  t.equal(report.byStatus[500] ?? 0, 0, 'no 500');
  checkAnswered(t, report);
  // a connection already on the new primary stays there at a later sentinel's announcement (ioredis's
  // own detector reconnected at each one, and a write in that gap answered 503)
  checkNoRelapse(t, report, [a, b]);
  for (const instance of [a, b]) {
    const metrics = parseExposition(await scrape(instance.ports.admin));
    t.ok(sum(metrics, 'portico_redis_command_errors_total', { kind: 'connection' }) > 0, 'the failover shows as Redis connection errors');
    t.ok(metrics.samples.some((s) => s.name === 'portico_redis_unreplicated_writes_total'), 'unreplicated writes are counted');
  }

  // a create on each instance sends a change notice, so both lists are read again
  for (const instance of [a, b]) {
    const made = await on(instance, key, { method: 'POST', path: '/v1/categories', json: { name: 'after' } });
    t.equal(made.status, 201, `a create works (${made.text.slice(0, 200)})`);
    if (made.status !== 201) t.comment(instance.logs.filter((l) => !l.includes('"msg":"request"')).slice(-8).join('\n').slice(0, 4000));
  }
  await checkKept(t, [a, b], key, report);
});

t.test('the quota is exact across both instances after the failover', async (t) => {
  const { key } = await accountWithKey(b.ports.admin, 'enterprise', 'production', { perMinute: 50, perDay: 1000 });
  // the failover limiter probes Redis again within a second of its last failure
  await sleep(1500);
  await roomInMinute();
  let previous: number | null = null;
  for (let i = 0; i < 10; i++) {
    const instance = i % 2 ? a : b;
    const answer = await on(instance, key, { path: '/v1/categories' });
    t.equal(answer.status, 200, `request ${i} answers 200 (${answer.text.slice(0, 200)})`);
    if (answer.status !== 200) t.comment(instance.logs.filter((l) => !l.includes('"msg":"request"')).slice(-12).join('\n').slice(0, 4000));
    const remaining = Number(answer.headers['x-ratelimit-remaining']);
    if (previous !== null) t.equal(remaining, previous - 1, 'one shared counter');
    previous = remaining;
  }
});

t.test('Redis stopped entirely: reads answer from what each instance saw; a revoked key stays refused', async (t) => {
  const { key, keyId } = await accountWithKey(a.ports.admin, 'enterprise', 'production', { perMinute: 100_000, perDay: 1_000_000 });
  const spare = await accountWithKey(a.ports.admin, 'enterprise', 'production', { perMinute: 100_000, perDay: 1_000_000 });
  // both instances know both keys and the list, then each creates a category: the other gets a
  // change notice for the list it holds (the case where a dropped copy left nothing to answer with)
  const seen = new Map<Child, number[]>();
  for (const instance of [a, b]) {
    t.equal((await on(instance, key, { path: '/v1/categories' })).status, 200);
    const list = await on(instance, spare.key, { path: '/v1/categories' });
    t.equal(list.status, 200);
    seen.set(instance, (list.json as Array<{ id: number }>).map((c) => c.id));
  }
  for (const instance of [a, b]) t.equal((await on(instance, key, { method: 'POST', path: '/v1/categories', json: { name: 'last' } })).status, 201);
  t.equal((await admin(a.ports.admin, 'DELETE', `/admin/keys/${keyId}`)).status < 300, true, 'the key is revoked');
  await sleep(300);
  await Promise.all([...topology.nodes, ...topology.sentinels].map((n) => n.kill()));

  for (const instance of [a, b]) {
    const list = await on(instance, spare.key, { path: '/v1/categories' });
    t.equal(list.status, 200, `the category list answers from the last copy (${list.text.slice(0, 200)})`);
    const ids = new Set((list.json as Array<{ id: number }>).map((c) => c.id));
    t.ok(seen.get(instance)!.every((id) => ids.has(id)), 'with every category this instance had seen');
    // 401 on both: the one that revoked it, and the other from the notice, which says what changed
    // (it answered 503: it had dropped its copy at the notice and could not look the key up)
    const revoked = await on(instance, key, { path: '/v1/categories' });
    t.equal(revoked.status, 401, 'the revoked key stays refused, as revoked');
    const write = await on(instance, spare.key, { method: 'POST', path: '/v1/categories', json: { name: 'no' } });
    t.equal(write.status, 503, 'a write answers 503');
    t.ok(write.headers['retry-after'], 'with Retry-After');
  }
  const ready = await admin(a.ports.admin, 'GET', '/readyz');
  t.match(ready.json, { redis: 'degraded', mode: 'sentinel' });
});
