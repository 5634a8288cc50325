// A planned switchover whose leader's events reach Portico late. The leader publishes +selected-slave,
// promotes the chosen replica a moment later, and only then (seconds on) makes the old primary a
// replica, dropping what was written to it meanwhile. A write made on the old primary after the
// promotion is still confirmed by WAIT — by the replica that was not promoted — and was acknowledged
// whenever Portico heard +selected-slave after that (a busy event loop, a slow link to the leader): one
// acknowledged write lost in a loaded full run. An acknowledged write now also waits until every
// sentinel's events sent so far are heard (a PING on each listener, answered in order), and a failover
// begun since the write refuses it (503): its outcome is unknown.
// Here the leader is reached only through a relay on loopback that holds what it sends by DELAY_MS,
// in order (it announces the relay's port to the other sentinels, so Portico finds it there).
import t from 'tap';
import type { Redis } from 'ioredis';
import { connectRedis } from '../../src/state/redis.ts';
import { cli, startSentinel } from '../helpers/redis-topology.ts';
import { startRelay } from '../helpers/tcp-relay.ts';

const DELAY_MS = 400;
const WRITERS = 20;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const peerPort = (client: Redis) => (client as unknown as { stream?: { remotePort?: number } }).stream?.remotePort;

t.test('a switchover whose leader is heard late: no acknowledged write is lost', async (t) => {
  let leaderPort: number | undefined;
  // what the leader sends reaches Portico DELAY_MS later, in order
  const relay = await startRelay(() => leaderPort, () => ({ down: (bytes, send) => void setTimeout(send, DELAY_MS, bytes) }));
  t.teardown(() => relay.close());
  const topology = await startSentinel({ sentinelAnnouncePorts: { 0: relay.port } });
  t.teardown(() => topology.stop());
  const [leader, ...others] = topology.sentinels;
  leaderPort = leader.port;
  // the others name the leader by the relay's port (its hello messages say so within ~2 s)
  const deadline = Date.now() + 20_000;
  const namedByRelay = async () => (await Promise.all(others.map((s) => cli(s.port, 'SENTINEL', 'SENTINELS', topology.name)))).every((answer) => answer.includes(String(relay.port)) && !answer.split('\n').includes(String(leader.port)));
  while (!(await namedByRelay()) && Date.now() < deadline) await sleep(200);
  t.ok(await namedByRelay(), 'the other sentinels name the leader at the relay');

  // Portico is told of the other two, and finds the leader through them: only at the relay
  const conns = connectRedis(`redis+sentinel://${others.map((s) => `127.0.0.1:${s.port}`).join(',')}/${topology.name}`, { commandTimeoutMs: 1000 });
  t.teardown(() => {
    conns.subscriber.disconnect();
    conns.client.disconnect();
  });
  const { client } = conns;
  await Promise.all([client, conns.subscriber].map((c) => (c.status === 'ready' ? undefined : new Promise((resolve) => c.once('ready', resolve)))));
  await conns.sentinelsHeard;
  const listeners = await cli(leader.port, 'CLIENT', 'LIST');
  t.equal(listeners.match(/name=portico-switch /g)?.length, 1, 'the leader is listened to once (through the relay)');
  const before = await topology.primary();

  const acknowledged: string[] = [];
  let refused = 0;
  let writing = true;
  let next = 0;
  const writer = async () => {
    while (writing) {
      const value = String(next++);
      try {
        const mark = conns.writeMark();
        await client.rpush('portico:late-writes', value);
        await conns.acknowledge(mark);
        acknowledged.push(value);
      } catch {
        refused++;
        await sleep(20);
      }
    }
  };
  const writers = Array.from({ length: WRITERS }, writer);
  await sleep(1_000);
  t.ok(acknowledged.length > 0, 'writes are acknowledged before the switchover');

  t.equal(await cli(leader.port, 'SENTINEL', 'FAILOVER', topology.name), 'OK', 'a switchover begins');
  const moved = () => client.status === 'ready' && peerPort(client) !== before.port;
  while (!moved() && Date.now() < deadline + 20_000) await sleep(20);
  t.ok(moved(), 'the client left the old primary');
  await topology.settled();
  // the old primary is made a replica (and drops what only it had) some seconds after the promotion
  const old = before.port;
  const demoted = async () => (await cli(old, 'INFO', 'replication')).includes('role:slave');
  const until = Date.now() + 30_000;
  while (!(await demoted()) && Date.now() < until) await sleep(200);
  t.ok(await demoted(), 'the old primary is a replica now');
  await sleep(1_000);
  writing = false;
  await Promise.all(writers);

  const kept = new Set(await client.lrange('portico:late-writes', 0, -1));
  t.comment(`${acknowledged.length} writes acknowledged, ${refused} refused`);
  t.ok(refused > 0, 'writes were refused during the switchover');
  t.same(acknowledged.filter((value) => !kept.has(value)), [], 'every acknowledged write is on the new primary');
});
