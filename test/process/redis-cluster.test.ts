// Two real Portico processes on a real Redis Cluster (DESIGN §8; TOOLCHAIN "Redis topologies"): three
// primaries with a replica each. One quota across instances, unique category ids under concurrent
// creates, a revocation seen by the other instance at once; slots moved under traffic with
// `redis-cli --cluster reshard` cost no request; a kill -9 of the primary owning the busy state slot
// is followed like a Sentinel failover: 503 with Retry-After meanwhile, nothing acknowledged lost.
import t from 'tap';
import { spawnPortico, cleanup, type Child } from '../helpers/portico.ts';
import { api, admin, accountWithKey, request } from '../helpers/client.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { cli, startCluster, type RedisNode } from '../helpers/redis-topology.ts';
import { checkAnswered, checkKept, checkPlannedSwitchover, startTraffic, type TrafficReport } from '../helpers/failover-traffic.ts';
import { keySlot } from '../../src/state/redis-slot.ts';
import { CLUSTER_KEY_PREFIX } from '../../src/state/redis-connect.ts';
import { roomInMinute } from '../helpers/minute.ts';

const topology = await startCluster();
t.teardown(() => topology.stop());

const spawn = async (): Promise<Child> => {
  // one worker: each instance is one process with one cache
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
const STATE_SLOT = keySlot(CLUSTER_KEY_PREFIX);
const unlimited = { perMinute: 1_000_000, perDay: 10_000_000 };

/** the node replicating `primary` */
async function replicaOf(primary: RedisNode): Promise<RedisNode> {
  for (const node of topology.nodes) {
    const info = await cli(node.port, 'INFO', 'replication').catch(() => '');
    if (info.includes('role:slave') && new RegExp(`^master_port:${primary.port}\\s*$`, 'm').test(info)) return node;
  }
  throw new Error(`no replica of ${primary.port}`);
}

const describe = (report: TrafficReport) =>
  `answers by status: ${JSON.stringify(report.byStatus)}; no answer: ${report.noAnswer}; longest request ${Math.round(report.longestMs)} ms`;

t.test('both instances run on the cluster and say so', async (t) => {
  for (const instance of [a, b]) {
    const ready = await admin(instance.ports.admin, 'GET', '/readyz');
    t.equal(ready.status, 200);
    t.match(ready.json, { redis: 'ok', mode: 'cluster' });
  }
});

t.test('one quota, one revocation, shared accounts across instances', async (t) => {
  const { key, keyId } = await accountWithKey(a.ports.admin, 'enterprise', 'production', { perMinute: 50, perDay: 1000 });
  await roomInMinute();
  let previous: number | null = null;
  for (let i = 0; i < 10; i++) {
    const answer = await on(i % 2 ? a : b, key, { path: '/v1/categories' });
    t.equal(answer.status, 200, 'an account made on A works on B');
    const remaining = Number(answer.headers['x-ratelimit-remaining']);
    if (previous !== null) t.equal(remaining, previous - 1, 'one shared counter');
    previous = remaining;
  }
  t.equal((await admin(a.ports.admin, 'DELETE', `/admin/keys/${keyId}`)).status, 204);
  t.equal((await on(b, key, { path: '/v1/categories' })).status, 401, 'the key revoked on A is refused on B at once');
});

t.test('a project created on A is served by B, and its upstream change too', async (t) => {
  const [first, second] = await Promise.all([startUpstream(), startUpstream()]);
  t.teardown(() => Promise.all([first.stop(), second.stop()]));
  const { accountId } = await accountWithKey(a.ports.admin, 'pro');
  const project = await admin(a.ports.admin, 'POST', '/admin/projects', { accountId, name: 'clustered', upstream: first.url });
  t.equal(project.status, 201, project.text);
  const viaB = () => request(b.ports.https, 'clustered.localhost', b.ca, { path: '/echo', identity: 'localhost' });
  let answer = await viaB();
  for (let i = 0; i < 20 && answer.status !== 200; i++) answer = await sleep(50).then(viaB);
  t.equal(answer.status, 200, `B serves the project made on A (${answer.status} ${answer.text.slice(0, 120)})`);
  t.equal(first.acceptedSockets > 0, true, 'through its upstream');
  t.equal((await admin(a.ports.admin, 'PATCH', `/admin/projects/${project.json.id}`, { upstream: second.url })).status, 200);
  for (let i = 0; i < 20 && second.acceptedSockets === 0; i++) {
    await viaB();
    await sleep(50);
  }
  t.ok(second.acceptedSockets > 0, 'B follows the upstream changed on A');
});

t.test('slots moved under traffic cost no request', async (t) => {
  const { key, accountId } = await accountWithKey(a.ports.admin, 'enterprise', 'production', unlimited);
  const traffic = startTraffic([a, b], key, { label: 'reshard' });
  // admin writes too: a new API key is new keys in the state slot, which Redis refuses (-TRYAGAIN)
  // while that slot is half moved; they are held until it has moved
  const keysMade: Record<number, number> = {};
  let making = true;
  const makingKeys = Promise.all([a, b].map(async (instance) => {
    while (making) {
      const made = await admin(instance.ports.admin, 'POST', '/admin/keys', { accountId });
      keysMade[made.status] = (keysMade[made.status] ?? 0) + 1;
    }
  }));
  await sleep(500);
  const from = await topology.primaryOf(STATE_SLOT);
  const to = topology.nodes.find((n) => n !== from && topology.nodes.indexOf(n) < 3)!;
  // redis-cli moves the source's lowest slots first: slots 0 … the state slot, keys and all (the
  // first primary starts with 0–5460)
  await topology.reshard(from, to, STATE_SLOT + 1);
  const moved = (await topology.primaryOf(STATE_SLOT)) === to;
  await sleep(500);
  const report = await traffic.stop();
  making = false;
  await makingKeys;
  t.comment(`${moved ? 'the state slot moved' : 'the state slot stayed'}; ${describe(report)}; API keys made, by status: ${JSON.stringify(keysMade)}`);
  t.same(Object.keys(keysMade), ['201'], 'every API key asked for was made');
  t.equal(report.noAnswer, 0, 'every request got an answer');
  t.same(Object.keys(report.readsByStatus), ['200'], `every read answered 200 (${JSON.stringify(report.readsByStatus)})`);
  t.same(Object.keys(report.byStatus).map(Number).filter((s) => s >= 500), [], 'no 5xx');
  t.equal(report.created.size, report.byStatus[201], 'every create got its own id');
});

t.test('a planned failover (CLUSTER FAILOVER on a replica) of the state slot under traffic: writes refused only while the replica takes over, none lost', async (t) => {
  // what an operator does for maintenance: the replica takes over with the primary's agreement
  const { key } = await accountWithKey(a.ports.admin, 'enterprise', 'production', unlimited);
  const traffic = startTraffic([a, b], key, { label: 'switchover' });
  await sleep(1000);
  const primary = await topology.primaryOf(STATE_SLOT);
  const replica = await replicaOf(primary);
  traffic.markFailover();
  t.equal(await cli(replica.port, 'CLUSTER', 'FAILOVER'), 'OK');
  // the command answers at once; the replica takes over once it has caught up
  for (let i = 0; i < 300 && (await topology.primaryOf(STATE_SLOT)) === primary; i++) await sleep(50);
  await traffic.recovered();
  await sleep(1000);
  const report = await traffic.stop();
  t.equal((await topology.primaryOf(STATE_SLOT)).port, replica.port, 'the replica took over the slot');
  checkPlannedSwitchover(t, report, [a, b]);
  t.equal(report.created.size, report.byStatus[201], 'every create got its own id');
  await checkKept(t, [a, b], key, report);
});

t.test('a kill -9 of the primary owning the state slot under traffic', async (t) => {
  const { key } = await accountWithKey(b.ports.admin, 'enterprise', 'production', unlimited);
  const traffic = startTraffic([a, b], key, { label: 'failover' });
  await sleep(1500);
  const primary = await topology.primaryOf(STATE_SLOT);
  traffic.markFailover();
  await primary.kill();
  await traffic.recovered();
  await sleep(500);
  const report = await traffic.stop();
  t.not((await topology.primaryOf(STATE_SLOT)).port, primary.port, 'a replica took over the slot');
  t.comment(describe(report));
  t.comment(`writes failed from the first failure to the first success after the last one: ${report.instances.map((r) => (r.firstFailureMs === null ? 'never' : r.recoveredMs === null ? 'not recovered' : `${Math.round(r.recoveredMs - r.firstFailureMs)} ms`)).join(', ')}`);
  checkAnswered(t, report);
  t.equal(report.created.size, report.byStatus[201], 'every create got its own id');

  for (const instance of [a, b]) t.equal((await on(instance, key, { method: 'POST', path: '/v1/categories', json: { name: 'after' } })).status, 201);
  await checkKept(t, [a, b], key, report);

  // the quota is exact again once the limiter's breaker lets Redis back in (within a second)
  const fresh = await accountWithKey(a.ports.admin, 'enterprise', 'production', { perMinute: 50, perDay: 1000 });
  await sleep(1500);
  await roomInMinute();
  let previous: number | null = null;
  for (let i = 0; i < 6; i++) {
    const answer = await on(i % 2 ? a : b, fresh.key, { path: '/v1/categories' });
    const remaining = Number(answer.headers['x-ratelimit-remaining']);
    if (previous !== null) t.equal(remaining, previous - 1, 'one shared counter after the failover');
    previous = remaining;
  }
});
