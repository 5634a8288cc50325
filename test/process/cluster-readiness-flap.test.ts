// A kill -9 of the Cluster primary holding the state slot: /readyz, portico_redis_up and the "Redis
// unreachable" / "Redis is back" lines follow one view, and it changes once each way per outage (README,
// "Redis outages"). The view said "up" again and again while the failover was under way and every
// write answered 503: the PING meant for the state's node went to any other node once ioredis had
// dropped the dead node's connection (its slot map still named it), and that node answered PONG.
// Each "ok" during the outage is checked against the cluster itself: until the replica of the killed
// primary has taken over, no write to the state slot can succeed, so "ok" then is wrong however the
// timings fall.
import t from 'tap';
import { Redis } from 'ioredis';
import { spawnPortico, cleanup } from '../helpers/portico.ts';
import { admin, api, accountWithKey } from '../helpers/client.ts';
import { cli, startCluster, type RedisNode } from '../helpers/redis-topology.ts';
import { keySlot } from '../../src/state/redis-slot.ts';
import { CLUSTER_KEY_PREFIX } from '../../src/state/redis-connect.ts';
import { connectRedis } from '../../src/state/redis.ts';
import { watchRedis } from '../../src/state/redis-watch.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const STATE_SLOT = keySlot(CLUSTER_KEY_PREFIX);
const SAMPLE_EVERY_MS = 50;
/** the state slot's primary the first test kills */
let killed: RedisNode | undefined;

const topology = await startCluster();
t.teardown(() => topology.stop());
// one worker: /readyz is then always answered from the same view (each worker has its own)
const portico = await spawnPortico({ PORTICO_REDIS_URL: topology.url }, ['--workers', '1']);
t.teardown(async () => {
  await portico.kill('SIGKILL');
  cleanup(portico.env.PORTICO_DATA_DIR, portico.env.PORTICO_CERTS_DIR);
});

/** the node replicating `primary`: the one that takes its slots over */
async function replicaOf(primary: RedisNode): Promise<RedisNode> {
  for (const node of topology.nodes) {
    const info = await cli(node.port, 'INFO', 'replication').catch(() => '');
    if (info.includes('role:slave') && new RegExp(`^master_port:${primary.port}\\s*$`, 'm').test(info)) return node;
  }
  throw new Error(`no replica of ${primary.port}`);
}

t.test('kill -9 of the state slot\'s primary: the view goes down once and up once, not before the replica has taken over', async (t) => {
  const { key } = await accountWithKey(portico.ports.admin, 'enterprise', 'production', { perMinute: 1_000_000, perDay: 10_000_000 });
  t.equal((await admin(portico.ports.admin, 'GET', '/readyz')).json?.redis, 'ok', 'ready before the kill');
  const primary = await topology.primaryOf(STATE_SLOT);
  killed = primary;
  const replica = new Redis({ host: '127.0.0.1', port: (await replicaOf(primary)).port, maxRetriesPerRequest: 0 });
  t.teardown(() => replica.disconnect());
  // the earliest moment a write to the state slot can succeed again: the replica calls itself primary
  const tookOver = async () => ((await replica.call('ROLE')) as [string])[0] === 'master';

  const samples: Array<{ at: number; redis: string }> = [];
  /** "ok" answered after the view had gone down, while the replica had not taken over yet */
  const early: number[] = [];
  const writes: Array<{ sentAt: number; status: number }> = [];
  let over = false;
  let running = true;
  const started = performance.now();
  const now = () => Math.round(performance.now() - started);
  const logsBefore = portico.logs.length;

  await primary.kill();
  const sampler = (async () => {
    while (running) {
      const answer = await admin(portico.ports.admin, 'GET', '/readyz');
      const at = now();
      const redis = String(answer.json?.redis);
      samples.push({ at, redis });
      if (redis === 'ok' && !over && samples.some((s) => s.redis !== 'ok')) {
        over = await tookOver();
        if (!over) early.push(at);
      }
      await sleep(SAMPLE_EVERY_MS);
    }
  })();
  const writer = (async () => {
    for (let n = 0; running; n++) {
      const sentAt = now();
      const answer = await api(portico.ports.https, portico.ca, key, { method: 'POST', path: '/v1/categories', json: { name: `flap-${n}` } });
      writes.push({ sentAt, status: answer.status });
      await sleep(SAMPLE_EVERY_MS);
    }
  })();

  // until writes work again and the view has said ok since, then a second more for a relapse
  const deadline = performance.now() + 30_000;
  const recovered = () => {
    const failed = writes.findLastIndex((w) => w.status !== 201);
    const upAgain = samples.findLastIndex((s) => s.redis !== 'ok');
    return failed !== -1 && writes.length - failed > 5 && upAgain !== -1 && samples.length - upAgain > 5;
  };
  while (!recovered() && performance.now() < deadline) await sleep(SAMPLE_EVERY_MS);
  await sleep(1000);
  running = false;
  await Promise.all([sampler, writer]);

  // the samples as runs: "ok@0 degraded@40 ok@2900" is one outage seen once
  const runs = samples.filter((s, i) => i === 0 || s.redis !== samples[i - 1].redis).map((s) => `${s.redis}@${s.at}`);
  const failedWrites = writes.filter((w) => w.status !== 201);
  const lines = portico.logs.slice(logsBefore).map((line) => {
    try {
      return String(JSON.parse(line).msg);
    } catch {
      return '';
    }
  });
  t.comment(`/readyz: ${runs.join(' ')}; writes: ${failedWrites.length} of ${writes.length} refused, the last one sent at ${failedWrites.at(-1)?.sentAt ?? '-'} ms`);
  t.ok(failedWrites.length > 0 && failedWrites.every((w) => w.status === 503), 'writes were refused (503) while the state slot had no primary');
  t.ok(over || (await tookOver()), 'the replica took the state slot over');
  t.same(early, [], '/readyz never said "ok" again before the replica had taken over (ms after the kill)');
  t.same(runs.slice(1).map((r) => r.split('@')[0]), runs[0].startsWith('ok') ? ['degraded', 'ok'] : ['ok'], `/readyz went degraded once and ok once (${runs.join(' ')})`);
  t.same(lines.filter((msg) => msg.startsWith('Redis unreachable') || msg.startsWith('Redis is back')).map((msg) => msg.split(';')[0]), ['Redis unreachable', 'Redis is back'], 'one "Redis unreachable" and one "Redis is back" line');
  const backAt = samples.find((s, i) => s.redis === 'ok' && samples.slice(0, i).some((p) => p.redis !== 'ok'))?.at ?? Infinity;
  t.same(writes.filter((w) => w.sentAt > backAt && w.status !== 201).map((w) => `${w.sentAt}:${w.status}`), [], 'every write sent after /readyz said ok again was answered 201');
});

t.test('a replica that stops answering (SIGSTOP): a PING behind a write\'s WAIT waits for it instead of calling Redis unreachable', async (t) => {
  // a WAIT 1 holds its connection for the whole ack timeout while the replica the primary names online
  // does not confirm, and a PING sent behind it timed out after the command timeout alone (500 ms
  // against 1500): the view went down and up around every write. (A primary with no replica at all is
  // found out from its INFO before any WAIT: redis-replicas.ts)
  const commandTimeoutMs = 500;
  const ackTimeoutMs = 1500;
  const primary = await topology.primaryOf(STATE_SLOT);
  // the primary killed above, back as this one's replica, then frozen: still named online until repl-timeout
  await killed!.restart();
  const online = async () => /^slave0:.*state=online/m.test(await cli(primary.port, 'INFO', 'replication'));
  for (let i = 0; i < 300 && !(await online()); i++) await sleep(50);
  t.ok(await online(), 'the old primary is back as the replica of the state\'s primary');
  const frozen = killed!.process.pid!;
  process.kill(frozen, 'SIGSTOP');
  t.teardown(() => void process.kill(frozen, 'SIGCONT'));
  const connections = connectRedis(topology.url, { commandTimeoutMs, replicaAckTimeoutMs: ackTimeoutMs });
  t.teardown(() => {
    connections.subscriber.disconnect();
    connections.client.disconnect();
  });
  // with a node frozen, the cluster client can take a few seconds to be ready (a slot-map refresh that
  // asked the frozen node waits out its timeout): under a full test run it was not within 5 s
  const ready = async () => connections.client.status === 'ready' && (await connections.pingState().then(() => true, () => false));
  for (let i = 0; i < 300 && !(await ready()); i++) await sleep(50);
  const changes: boolean[] = [];
  const watch = watchRedis({
    ping: () => connections.pingState().then(() => true, () => false),
    connected: () => connections.client.status === 'ready',
    limiterUp: () => true,
    onChange: (up) => changes.push(up),
  }, 60_000);
  t.teardown(() => watch.stop());
  t.equal(watch.up, true, 'up to begin with');

  // a write for the WAIT to wait for (the cluster client adds the state's key prefix, so its slot)
  await connections.client.set('readiness-flap', '1');
  const started = performance.now();
  const acknowledged = connections.acknowledge();
  // the PING goes out once the WAIT is on its way
  await sleep(20);
  const up = await watch.check();
  const pingedMs = performance.now() - started;
  await acknowledged;
  t.ok(pingedMs >= ackTimeoutMs - 100, `the PING was answered after the WAIT (${Math.round(pingedMs)} ms)`);
  t.equal(up, true, 'the PING behind the WAIT counts as answered');
  t.same(changes, [], 'the view did not change');
});
