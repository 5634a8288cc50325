// `ratelimit.onRedisDown: closed` on a Redis Cluster, and a kill -9 of one primary (not the one holding
// the state): only the accounts whose counters live on that primary answer 503 while its replica takes
// over. The limiter had one breaker for every node, so the first call that failed on the dead primary
// answered every /v1 call 503, the accounts on the two live primaries too, until its probe found Redis
// again: a third of the cluster down stopped the whole API. Now each primary has its own breaker, and
// /readyz says "degraded" (200), not "down" (503), while some primaries answer.
import t from 'tap';
import { spawnPortico, cleanup } from '../helpers/portico.ts';
import { admin, api, accountWithKey } from '../helpers/client.ts';
import { startCluster, type RedisNode } from '../helpers/redis-topology.ts';
import { keySlot } from '../../src/state/redis-slot.ts';
import { CLUSTER_KEY_PREFIX } from '../../src/state/redis-connect.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const unlimited = { perMinute: 1_000_000, perDay: 10_000_000 };

// Redis's default, cluster-require-full-coverage yes, has every node answer -CLUSTERDOWN for every
// slot from the moment the dead primary is marked failed until its replica is promoted: no primary is
// left alone then. `no` (the README recommends it) keeps the live ones answering.
const topology = await startCluster({ fullCoverage: false });
t.teardown(() => topology.stop());
const portico = await spawnPortico({ PORTICO_REDIS_URL: topology.url, PORTICO_RATELIMIT_ON_REDIS_DOWN: 'closed' }, ['--workers', '1']);
t.teardown(async () => {
  await portico.kill('SIGKILL');
  cleanup(portico.env.PORTICO_DATA_DIR, portico.env.PORTICO_CERTS_DIR);
});
const on = (key: string) => api(portico.ports.https, portico.ca, key, { path: '/v1/categories' });

t.test('closed mode: a primary killed under traffic stops only the accounts counted on it', async (t) => {
  const stateNode = await topology.primaryOf(keySlot(CLUSTER_KEY_PREFIX));
  // a key per primary: its account's counters (`<account>:production`) hash to a slot there
  const keys = new Map<RedisNode, string>();
  for (let i = 0; i < 60 && keys.size < 3; i++) {
    const made = await accountWithKey(portico.ports.admin, 'enterprise', 'production', unlimited);
    const node = await topology.primaryOf(keySlot(`${made.accountId}:production`));
    if (!keys.has(node)) keys.set(node, made.key);
  }
  if (keys.size < 3) return t.fail(`accounts on ${keys.size} primaries only after 60 tries`);
  const victim = [...keys.keys()].find((node) => node !== stateNode)!;
  const victimKey = keys.get(victim)!;
  for (const key of keys.values()) t.equal((await on(key)).status, 200, 'each account answers before the kill');

  const statuses = new Map<string, number[]>([...keys.values()].map((key) => [key, []]));
  let running = true;
  const loops = [...keys.values()].map(async (key) => {
    while (running) {
      statuses.get(key)!.push((await on(key)).status);
      await sleep(10);
    }
  });
  // /readyz meanwhile: a load balancer honouring it must not pull the instance for one primary
  const readyz: string[] = [];
  const probing = (async () => {
    while (running) {
      const answer = await admin(portico.ports.admin, 'GET', '/readyz', undefined, null);
      readyz.push(`${answer.status} ${answer.json?.redis}`);
      await sleep(50);
    }
  })();
  await sleep(300);
  const killedAt = performance.now();
  await victim.kill();
  // the replica takes over within a few seconds (cluster-node-timeout 1000 ms); then the victim's account
  // answers again once its breaker's probe finds the new primary
  let back = false;
  while (!back && performance.now() - killedAt < 20_000) {
    await sleep(100);
    const victims = statuses.get(victimKey)!;
    back = victims.includes(503) && victims.at(-1) === 200;
  }
  const backAfterMs = Math.round(performance.now() - killedAt);
  await sleep(500);
  running = false;
  await Promise.all([...loops, probing]);

  const counts = (list: number[]) => JSON.stringify(list.reduce<Record<number, number>>((all, s) => ({ ...all, [s]: (all[s] ?? 0) + 1 }), {}));
  const victims = statuses.get(victimKey)!;
  t.ok(victims.includes(503), `the account counted on the killed primary was refused meanwhile (${counts(victims)})`);
  t.ok(back, `and answered 200 again ${backAfterMs} ms after the kill`);
  t.same(victims.filter((s) => s !== 200 && s !== 503), [], 'with 200 or 503 only');
  const seen = [...new Set(readyz)];
  t.ok(readyz.includes('200 degraded'), `/readyz said degraded while the primary was unreachable (seen: ${seen.join(', ')})`);
  t.same(readyz.filter((r) => r !== '200 ok' && r !== '200 degraded'), [], 'and never 503: the accounts on the live primaries were answered');
  const downLine = portico.logs.find((line) => line.includes('Redis unreachable'));
  t.match(downLine, `/v1 calls counted on an unreachable primary answer 503`, 'the log line says what is refused');
  t.match(downLine, `127.0.0.1:${victim.port}`, 'and names the primary');
  for (const [node, key] of keys) {
    if (node === victim) continue;
    const answers = statuses.get(key)!;
    t.ok(answers.length > 20, `${answers.length} calls of an account on a live primary${node === stateNode ? ' (the state one)' : ''}`);
    t.same(answers.filter((s) => s !== 200), [], `each answered 200 (${counts(answers)})`);
  }
});
