// Regression: while the Cluster slot holding a subject's counters was being moved (CLUSTER SETSLOT
// IMPORTING/MIGRATING, MIGRATE of its keys, SETSLOT NODE: what `redis-cli --cluster reshard` does per
// slot), every limiter call for the subject failed. The script declared a ban key, a refusal key and a
// prefix that never exists: the old owner answered -ASK (a declared key missing), the new one -TRYAGAIN
// (several keys, not all there), and the limiter's breaker opened for every subject. Now a subject's
// state is one key: the old owner runs the call while the key is there, the new one after -ASK.
// The slot is moved by hand here, so each call can be made at a known step of the migration.
import t, { type Test } from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { connectRedis } from '../../src/state/redis.ts';
import { RedisLimiter } from '../../src/ratelimit/redis-limiter.ts';
import { keySlot } from '../../src/state/redis-slot.ts';
import { cli, startCluster, type RedisNode } from '../helpers/redis-topology.ts';

const topology = await startCluster();
t.teardown(() => topology.stop());

/** the nodes that are primaries now */
async function primaries(): Promise<RedisNode[]> {
  const out = [];
  for (const node of topology.nodes) if ((await cli(node.port, 'ROLE')).startsWith('master')) out.push(node);
  return out;
}

async function newLimiter(t: Test): Promise<RedisLimiter> {
  const conns = connectRedis(topology.url, { commandTimeoutMs: 1000 });
  await new Promise((resolve) => (conns.client.status === 'ready' ? resolve(undefined) : conns.client.once('ready', resolve)));
  const limiter = new RedisLimiter(conns);
  t.teardown(async () => {
    await limiter.close();
    conns.client.disconnect();
    conns.subscriber.disconnect();
  });
  return limiter;
}

/** a subject whose slot no earlier test used, the primary owning it and another primary */
const usedSlots = new Set<number>();
async function subjectToMove(name: string): Promise<{ subject: string; key: string; slot: number; from: RedisNode; to: RedisNode }> {
  let subject = '';
  for (let i = 0; !subject; i++) if (!usedSlots.has(keySlot(`${name}-${i}`))) subject = `${name}-${i}`;
  const slot = keySlot(subject);
  usedSlots.add(slot);
  const from = await topology.primaryOf(slot);
  const to = (await primaries()).find((p) => p.port !== from.port)!;
  return { subject, key: `portico:rl:{${subject}}`, slot, from, to };
}

/** the first step of a migration: the slot is open on both sides, its keys still on the old owner */
async function openMigration(t: Test, slot: number, from: RedisNode, to: RedisNode): Promise<void> {
  const ids = await topology.ids();
  t.equal(await cli(to.port, 'CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', ids.get(from.port)!), 'OK', 'the new owner imports the slot');
  t.equal(await cli(from.port, 'CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', ids.get(to.port)!), 'OK', 'the old owner migrates it');
}

/** the last step: every primary names the new owner (the new one first, as redis-cli does) */
async function endMigration(t: Test, slot: number, from: RedisNode, to: RedisNode): Promise<void> {
  const ids = await topology.ids();
  const others = (await primaries()).filter((p) => p.port !== from.port && p.port !== to.port);
  for (const node of [to, from, ...others]) t.equal(await cli(node.port, 'CLUSTER', 'SETSLOT', String(slot), 'NODE', ids.get(to.port)!), 'OK', `${node.port} names the new owner`);
}

/** the -ASK redirections a node has answered */
const asks = async (node: RedisNode) => Number(/^errorstat_ASK:count=(\d+)/m.exec(await cli(node.port, 'INFO', 'errorstats'))?.[1] ?? 0);
const keysIn = async (node: RedisNode, slot: number) => Number(await cli(node.port, 'CLUSTER', 'COUNTKEYSINSLOT', String(slot)));

t.test('a subject\'s counters keep counting at every step of its slot\'s migration, exactly up to the limit', async (t) => {
  const limiter = await newLimiter(t);
  const { subject, key, slot, from, to } = await subjectToMove('migrate');
  const N = 10;
  const limit = { perMinute: N, perDay: 1000 };
  const ban = { refusals: 100, windowSeconds: 60, banSeconds: 60 };
  // one minute for the whole test, whatever the machine's pace
  const now = Date.now();
  const decisions: string[] = [];
  const call = async (step: string) => {
    try {
      const d = await limiter.consume(subject, limit, ban, now);
      decisions.push(d.allowed ? 'allowed' : d.reason);
    } catch (err) {
      decisions.push(`${step}: ${(err as Error).message}`);
    }
  };

  for (let i = 0; i < 4; i++) await call('before');
  t.equal(await keysIn(from, slot), 1, 'the key is on the old owner');

  await openMigration(t, slot, from, to);
  for (let i = 0; i < 3; i++) await call('slot open, key on the old owner');
  t.same(decisions, Array(7).fill('allowed'), 'the old owner answered while it had the key');

  t.equal(await cli(from.port, 'MIGRATE', '127.0.0.1', String(to.port), '', '0', '5000', 'KEYS', key), 'OK', 'MIGRATE moved the key');
  t.same([await keysIn(from, slot), await keysIn(to, slot)], [0, 1], 'the key is on the new owner, the slot still open');
  // the new owner has forgotten the script (SCRIPT FLUSH, a restart): the call sent there after -ASK is
  // sent again with the script itself, and that one needs its ASKING too
  let other = 'other-0';
  for (let i = 1; (await topology.primaryOf(keySlot(other))).port !== to.port; i++) other = `other-${i}`;
  await limiter.consume(other, limit, ban, now); // the limiter's connection to the new owner is open
  t.equal(await cli(to.port, 'SCRIPT', 'FLUSH'), 'OK', 'the new owner forgets its scripts');
  const asked = await asks(from);
  for (let i = 0; i < 4; i++) await call('slot open, key on the new owner');
  t.same(decisions.slice(7), ['allowed', 'allowed', 'allowed', 'rate_limited'], 'the new owner answered, up to the limit');
  t.equal(await asks(from) - asked, 4, 'each call went there after one -ASK from the old owner');

  await endMigration(t, slot, from, to);
  t.equal((await topology.primaryOf(slot)).port, to.port, 'the slot moved');
  for (let i = 0; i < 2; i++) await call('slot moved');
  t.same(decisions.slice(11), ['rate_limited', 'rate_limited'], 'still refused once the slot moved');

  t.equal(decisions.filter((d) => d === 'allowed').length, N, `exactly ${N} allowed`);
  t.equal(decisions.filter((d) => d !== 'allowed' && d !== 'rate_limited').length, 0, 'no call failed');
  t.equal(await cli(to.port, 'HGET', key, 'minuteUsed'), String(N), 'the counter holds every allowed call once');
  t.equal(await cli(to.port, 'HGET', key, 'dayUsed'), String(N));
});

t.test('callers in parallel through a migration: none fails, the counter holds every allowed call once', async (t) => {
  const limiter = await newLimiter(t);
  const { subject, key, slot, from, to } = await subjectToMove('migrate-parallel');
  const limit = { perMinute: 1_000_000, perDay: 1_000_000 };
  const ban = { refusals: 1_000_000, windowSeconds: 60, banSeconds: 1 };
  const now = Date.now();
  let allowed = 0;
  const failures: string[] = [];
  let running = true;
  const callers = Array.from({ length: 10 }, async () => {
    while (running) {
      try {
        if ((await limiter.consume(subject, limit, ban, now)).allowed) allowed++;
      } catch (err) {
        failures.push((err as Error).message);
      }
    }
  });
  // each step is held until calls have been answered in it
  const answeredDuring = async (ms: number) => {
    const before = allowed;
    await sleep(ms);
    return allowed - before;
  };

  t.ok(await answeredDuring(200) > 0, 'calls answered before the migration');
  await openMigration(t, slot, from, to);
  t.ok(await answeredDuring(300) > 0, 'calls answered while the key is on the old owner');
  t.equal(await cli(from.port, 'MIGRATE', '127.0.0.1', String(to.port), '', '0', '5000', 'KEYS', key), 'OK', 'MIGRATE moved the key');
  t.ok(await answeredDuring(300) > 0, 'calls answered while the key is on the new owner, the slot still open');
  await endMigration(t, slot, from, to);
  t.ok(await answeredDuring(200) > 0, 'calls answered once the slot moved');
  running = false;
  await Promise.all(callers);

  t.same(failures.slice(0, 5), [], `no call failed (${failures.length} did)`);
  t.equal(Number(await cli(to.port, 'HGET', key, 'dayUsed')), allowed, 'the counter holds every allowed call once');
});

t.test('a slot nobody serves: its calls fail, the connection to the live node that said so is kept', async (t) => {
  const limiter = await newLimiter(t);
  // with cluster-require-full-coverage no (the README's recommended setting), a node answers
  // -CLUSTERDOWN for a slot nobody serves and keeps serving its others
  for (const node of topology.nodes) await cli(node.port, 'CONFIG', 'SET', 'cluster-require-full-coverage', 'no');
  const { subject, slot, from } = await subjectToMove('unserved');
  let healthy = 'healthy-0';
  for (let i = 1; (await topology.primaryOf(keySlot(healthy))).port !== from.port || keySlot(healthy) === slot; i++) healthy = `healthy-${i}`;
  const limit = { perMinute: 1_000_000, perDay: 1_000_000 };
  const ban = { refusals: 1_000_000, windowSeconds: 60, banSeconds: 1 };
  // the node's connections whose last command was the limiter's script: the limiter's own (the count of
  // connections received also counted a replica's or ioredis's reconnecting under a loaded run)
  const limiterIds = async () => (await cli(from.port, 'CLIENT', 'LIST')).split('\n').filter((line) => / cmd=eval/.test(line)).map((line) => /^id=(\d+)/.exec(line)?.[1]).sort();
  t.ok((await limiter.consume(healthy, limit, ban)).allowed, 'a subject on the node is counted');
  t.equal(await cli(from.port, 'CLUSTER', 'DELSLOTS', String(slot)), 'OK', 'the node stops serving one slot');
  t.teardown(async () => {
    await cli(from.port, 'CLUSTER', 'ADDSLOTS', String(slot));
    for (const node of topology.nodes) await cli(node.port, 'CONFIG', 'SET', 'cluster-require-full-coverage', 'yes');
  });
  const before = await limiterIds();
  t.equal(before.length, 1, 'one limiter connection to the node');
  const refused = await limiter.consume(subject, limit, ban).then(() => 'answered', (err: Error) => err.message);
  t.match(refused, /CLUSTERDOWN/, `the call for the unserved slot fails with what the node said (${refused})`);
  // the same node, its other slots: answered on the connection the limiter had
  for (let i = 0; i < 5; i++) t.ok((await limiter.consume(healthy, limit, ban)).allowed, `call ${i + 1} on the node's other slot`);
  t.same(await limiterIds(), before, 'on the same connection (before: a new one)');
});
