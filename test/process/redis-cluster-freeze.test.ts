// A Cluster node holding the state frozen (SIGSTOP) for less than the cluster's node timeout, so no
// failover: a write from an account whose limiter slot is on that node waits out the limiter's call
// (the command timeout) and is then answered 503 at once, not after waiting as long again for the
// store (redis-connect.ts: the limiter names the node a call timed out on); and no write made after the
// freeze is sent into the frozen node (the PING before a command goes to the state's node, not to any
// node, which answered, and the write then went in and was applied on resume). Its own cluster, with a
// node timeout long enough to freeze a node for two command timeouts: the failing case is then 2 s
// against 1 s, far apart even on a loaded machine.
import t from 'tap';
import { spawnPortico, cleanup } from '../helpers/portico.ts';
import { api, accountWithKey } from '../helpers/client.ts';
import { startCluster } from '../helpers/redis-topology.ts';
import { keySlot } from '../../src/state/redis-slot.ts';
import { CLUSTER_KEY_PREFIX } from '../../src/state/redis-connect.ts';

const TIMEOUT_MS = 1000;
// a write done just before the freeze: its WAIT waits out the ack timeout past the command timeout,
// then its change notice waits up to 200 ms (redis.ts NOTICE_WAIT_MS): the longest a write is meant to take
const ACK_TIMEOUT_MS = 200;
const LONGEST_MS = TIMEOUT_MS + ACK_TIMEOUT_MS + 200;
const FROZEN_MS = 2500;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const topology = await startCluster({ nodeTimeoutMs: 10_000 });
t.teardown(() => topology.stop());
const portico = await spawnPortico({ PORTICO_REDIS_URL: topology.url, PORTICO_REDIS_COMMAND_TIMEOUT_MS: String(TIMEOUT_MS), PORTICO_REDIS_REPLICA_ACK_TIMEOUT_MS: String(ACK_TIMEOUT_MS) }, ['--workers', '1']);
t.teardown(async () => {
  await portico.kill('SIGKILL');
  cleanup(portico.env.PORTICO_DATA_DIR, portico.env.PORTICO_CERTS_DIR);
});
const on = (key: string, options: Parameters<typeof api>[3] = {}) => api(portico.ports.https, portico.ca, key, options);

t.test('a write as the state node freezes waits one command timeout, not the limiter\'s and then the store\'s', async (t) => {
  const stateNode = await topology.primaryOf(keySlot(CLUSTER_KEY_PREFIX));
  // an account whose limiter subject (`<account>:production`) hashes to a slot on the state node
  let key: string | null = null;
  for (let i = 0; i < 40 && key === null; i++) {
    const made = await accountWithKey(portico.ports.admin, 'enterprise', 'production', { perMinute: 1_000_000, perDay: 10_000_000 });
    if ((await topology.primaryOf(keySlot(`${made.accountId}:production`))) === stateNode) key = made.key;
  }
  if (key === null) return t.fail('no account with its limiter slot on the state node in 40 tries');
  t.equal((await on(key, { method: 'POST', path: '/v1/categories', json: { name: 'before' } })).status, 201);

  const answers: Array<{ status: number; ms: number; name: string; started: number }> = [];
  let running = true;
  let n = 0;
  const loops = Array.from({ length: 3 }, async () => {
    while (running) {
      const name = `frozen-${++n}`;
      const started = performance.now();
      const answer = await on(key, { method: 'POST', path: '/v1/categories', json: { name } });
      answers.push({ status: answer.status, ms: performance.now() - started, name, started });
      await sleep(5);
    }
  });
  await sleep(200);
  const frozenAt = performance.now();
  stateNode.process.kill('SIGSTOP');
  await sleep(FROZEN_MS);
  stateNode.process.kill('SIGCONT');
  await sleep(500);
  running = false;
  await Promise.all(loops);

  t.equal(await topology.primaryOf(keySlot(CLUSTER_KEY_PREFIX)), stateNode, 'no failover');
  t.same(answers.filter((a) => a.status !== 201 && a.status !== 503).map((a) => a.status), [], 'each write answered 201 or 503');
  t.ok(answers.some((a) => a.status === 503), `writes refused while frozen (${answers.filter((a) => a.status === 503).length})`);
  // one timeout (and a WAIT's), with room for a loaded machine; two command timeouts would be 2 s and more
  const slowest = answers.reduce((a, b) => (b.ms > a.ms ? b : a));
  // where it started against the freeze, and how the writes around it went, says which wait it made twice
  const around = answers.filter((a) => Math.abs(a.started - slowest.started) < 1500).map((a) => `${Math.round(a.started - frozenAt)}:${Math.round(a.ms)}:${a.status}`);
  t.ok(slowest.ms < LONGEST_MS + 300, `slowest write: ${Math.round(slowest.ms)} ms, answered ${slowest.status}, sent ${Math.round(slowest.started - frozenAt)} ms after the freeze (command timeout ${TIMEOUT_MS} ms, at most ${LONGEST_MS} ms meant)`, { around });
  const list = await on(key, { path: '/v1/categories' });
  const names = new Set((list.json as Array<{ name: string }>).map((x) => x.name));
  // a write already sent when the node froze is applied when it resumes, though answered 503 (its
  // outcome was unknown); one made after the freeze is never sent into it
  const appliedAfter503 = answers.filter((a) => a.status === 503 && names.has(a.name));
  t.comment(`answered 503 but applied on resume (sent as the node froze): ${appliedAfter503.length}`);
  t.same(appliedAfter503.filter((a) => a.started > frozenAt).map((a) => a.name), [], 'no write made after the freeze and answered 503 was applied');
  t.same(answers.filter((a) => a.status === 201 && !names.has(a.name)).map((a) => a.name), [], 'every write answered 201 is there');
});
