// `node bench/redis-failover.ts` — what a failover costs the rate limiter (README, "Many processes and
// many instances"). Limiter counters do not wait for replicas (DESIGN §8), so a kill -9 of a primary
// forgets the increments it had answered but not yet sent to the replica that takes over. This
// measures how many: 200 callers count one subject as fast as the limiter's pipelined connection
// goes, the primary owning the subject is killed, and once a promoted replica answers, its day
// counter is compared with the increments Redis had answered as allowed. It also measures the
// limiter's outage: the first failed call to the first call Redis answers again.
// Environment: FAILOVER_ROUNDS (3 per topology), FAILOVER_CALLERS (200).
import { connectRedis } from '../src/state/redis.ts';
import { RedisLimiter } from '../src/ratelimit/redis-limiter.ts';
import { keySlot } from '../src/state/redis-slot.ts';
import { startCluster, startSentinel, cli, type RedisNode } from '../test/helpers/redis-topology.ts';

const ROUNDS = Number(process.env.FAILOVER_ROUNDS ?? 3);
const CALLERS = Number(process.env.FAILOVER_CALLERS ?? 200);
const limit = { perMinute: 1_000_000_000, perDay: 1_000_000_000 };
const ban = { refusals: 1_000_000, windowSeconds: 60, banSeconds: 1 };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Round {
  counted: number;
  stored: number;
  outageMs: number;
  rate: number;
}

async function round(url: string, primaryOf: (subject: string) => Promise<RedisNode>, nodes: () => RedisNode[], subject: string): Promise<Round> {
  const connections = connectRedis(url, { commandTimeoutMs: 150 });
  await new Promise((resolve) => (connections.client.status === 'ready' ? resolve(undefined) : connections.client.once('ready', resolve)));
  const limiter = new RedisLimiter(connections);
  let counted = 0;
  let killedAt = 0;
  let firstFailure: number | null = null;
  let recovered: number | null = null;
  let running = true;
  const started = performance.now();
  const callers = Array.from({ length: CALLERS }, async () => {
    while (running) {
      try {
        const decision = await limiter.consume(subject, limit, ban);
        if (decision.allowed) counted++;
        if (firstFailure !== null && recovered === null) recovered = performance.now();
      } catch {
        if (killedAt) firstFailure ??= performance.now();
        await sleep(5);
      }
    }
  });
  await sleep(1500);
  const primary = await primaryOf(subject);
  const before = counted;
  const rate = before / ((performance.now() - started) / 1000);
  killedAt = performance.now();
  await primary.kill();
  // counting stops being trusted from the kill on: what Redis answered before it is what may be lost
  const countedAtKill = counted;
  while (recovered === null && performance.now() - killedAt < 30_000) await sleep(20);
  running = false;
  await Promise.all(callers);
  // the counter as the new primary has it, minus what was counted after the failover
  const after = counted - countedAtKill;
  const next = await primaryOf(subject);
  const stored = Number((await cli(next.port, 'HGET', `portico:rl:{${subject}}`, 'dayUsed')) || 0) - after;
  await limiter.close();
  connections.client.disconnect();
  connections.subscriber.disconnect();
  void nodes;
  return { counted: countedAtKill, stored, outageMs: (recovered ?? NaN) - (firstFailure ?? killedAt), rate };
}

function report(name: string, rounds: Round[]): void {
  console.log(`\n${name}`);
  for (const r of rounds) {
    console.log(`  ${Math.round(r.rate).toLocaleString('en-US')} counted calls/s; at the kill Redis had answered ${r.counted.toLocaleString('en-US')}; the promoted replica held ${r.stored.toLocaleString('en-US')}: ${(r.counted - r.stored).toLocaleString('en-US')} forgotten (${((r.counted - r.stored) / r.rate * 1000).toFixed(1)} ms of traffic); limiter outage ${Math.round(r.outageMs)} ms`);
  }
}

const sentinelRounds: Round[] = [];
for (let i = 0; i < ROUNDS; i++) {
  const topology = await startSentinel();
  try {
    sentinelRounds.push(await round(topology.url, () => topology.primary(), () => topology.nodes, `lag-${i}`));
  } finally {
    await topology.stop();
  }
}
report('Sentinel (a primary, two replicas, three sentinels, down-after 1000 ms)', sentinelRounds);

const clusterRounds: Round[] = [];
for (let i = 0; i < ROUNDS; i++) {
  const topology = await startCluster();
  try {
    clusterRounds.push(await round(topology.url, (subject) => topology.primaryOf(keySlot(`{${subject}}`)), () => topology.nodes, `lag-${i}`));
  } finally {
    await topology.stop();
  }
}
report('Cluster (three primaries with a replica each, node timeout 1000 ms)', clusterRounds);
