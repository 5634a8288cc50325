// Scenario b on every Redis topology (DESIGN §9, issue 20): the same authenticated GET /v1/categories
// on a Portico whose state and limiter are on one Redis (scenario b's), through Sentinel (a primary,
// two replicas, three sentinels) and on a three-primary Cluster (a replica each), each against the
// bare Node HTTPS server answering the same body, in the same run. The topologies run on the load
// side's core(s), as scenario b's Redis does; each Portico runs alone on the server core. Beside each
// topology's Portico, its floor: the bare server making /v1's limiter call on that topology (informational),
// so what the topology itself costs is told apart from what Portico does on it.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { startCluster, startSentinel, type ClusterTopology, type SentinelTopology } from '../../test/helpers/redis-topology.ts';
import { provision, startPortico, type Portico } from '../lib/portico.ts';
import { expectStatus, get } from '../lib/check.ts';
import { processTree, stop } from '../lib/proc.ts';
import type { LoadResult } from '../lib/wrk.ts';
import { startBareServer, type Bare } from '../lib/bare.ts';

export interface TopologyPortico {
  /** 'Sentinel' or 'Cluster (3 primaries)' */
  topology: string;
  portico: Portico;
  auth: Record<string, string>;
  /** the bare server making the limiter call on this topology */
  floor: Bare;
}

export interface Topologies {
  porticos: TopologyPortico[];
  stop(): Promise<void>;
}

/**
 * Starts both topologies (pinned to `clientCpus`) and a Portico on each (pinned to `serverCpus`), with
 * the account, project and categories of `v1Body`, so every Portico answers the same bytes.
 */
export async function startTopologies(opts: { tmp: string; certsDir: string; originPort: number; serverCpus: string | null; clientCpus: string | null; v1Body: Buffer }): Promise<Topologies> {
  const started: Array<SentinelTopology | ClusterTopology> = [];
  const porticos: TopologyPortico[] = [];
  const stopAll = async () => {
    for (const p of porticos) {
      await stop(p.portico.process, 15_000);
      await stop(p.floor.process, 15_000);
    }
    await Promise.all(started.map((t) => t.stop()));
  };
  try {
    const sentinel = await startSentinel();
    started.push(sentinel);
    const cluster = await startCluster();
    started.push(cluster);
    if (opts.clientCpus) {
      for (const node of [...sentinel.nodes, ...sentinel.sentinels, ...cluster.nodes]) {
        spawnSync('taskset', ['-a', '-p', '-c', opts.clientCpus, String(node.process.pid)], { stdio: 'ignore' });
      }
    }
    for (const [topology, url] of [['Sentinel', sentinel.url], ['Cluster (3 primaries)', cluster.url]] as const) {
      const name = topology.split(' ')[0].toLowerCase();
      const portico = await startPortico({ dataDir: path.join(opts.tmp, `data-${name}`), certsDir: opts.certsDir, logFile: path.join(opts.tmp, `portico-${name}.log`), cpus: opts.serverCpus, redisUrl: url });
      let floor: Bare;
      try {
        floor = await startBareServer(`bare-https-limited-${name}`, opts.tmp, opts.serverCpus, portico, opts.v1Body, 'https', { redisUrl: url });
      } catch (err) {
        await stop(portico.process, 15_000);
        throw err;
      }
      const auth = await seed(portico, topology, opts.originPort, opts.v1Body);
      porticos.push({ topology, portico, auth, floor });
    }
    return { porticos, stop: stopAll };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

/**
 * The account, key, project and categories of `v1Body` on a Portico on another Redis than scenario b's,
 * so it answers the same bytes; the Authorization header of its key
 */
export async function seed(portico: Portico, topology: string, originPort: number, v1Body: Buffer): Promise<Record<string, string>> {
  const auth = { authorization: `Bearer ${(await provision(portico, originPort)).key}` };
  for (const category of JSON.parse(v1Body.toString('utf8')) as Array<{ name: string; description: string }>) {
    await expectStatus(`POST /v1/categories (${topology})`, get({ scheme: 'https', port: portico.https, hostname: 'api.localhost', path: '/v1/categories', method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ name: category.name, description: category.description }) }), 201);
  }
  const answer = await expectStatus(`GET /v1/categories (${topology})`, get({ scheme: 'https', port: portico.https, hostname: 'api.localhost', path: '/v1/categories', headers: auth }), 200);
  if (answer.body.length !== v1Body.length) throw new Error(`Portico on ${topology} answers ${answer.body.length} bytes for /v1/categories, the one on one Redis ${v1Body.length}`);
  return auth;
}

/** the shape of a bench/run.ts target */
interface Target {
  name: string;
  pids: () => number[];
  onServerCore: boolean;
  load: (seconds: number, mark?: (at: 'start' | 'end') => void) => Promise<LoadResult>;
  before?: () => void;
}

const NAMES = ['Sentinel', 'Cluster (3 primaries)'];
const floorOn = (topology: string) => `bare Node HTTPS + the limiter call (floor), ${topology}`;

/**
 * The scenario: `oneRedis` (scenario b's Portico) and a Portico on each topology, against `bare`. The
 * topologies and their Porticos start in setup() and stop in teardown(), so they idle on no other
 * scenario. `v1` makes the wrk load of GET /v1/categories on a port with a key.
 */
export function topologiesScenario(ctx: {
  tmp: string;
  certsDir: string;
  originPort: number;
  serverCpus: string | null;
  clientCpus: string | null;
  v1Body: Buffer;
  connections: number;
  oneRedis: Target;
  bare: Target;
  /** the bare server making the limiter call on one Redis (informational) */
  floor?: Target;
  v1: (port: number, headers: Record<string, string>) => (seconds: number) => Promise<LoadResult>;
}) {
  let topologies: Topologies | undefined;
  const on = (i: number) => topologies!.porticos[i];
  const targets: Target[] = [
    { ...ctx.oneRedis, name: 'Portico /v1, one Redis' },
    ...NAMES.map((name, i) => ({
      name: `Portico /v1, ${name}`,
      pids: () => processTree(on(i).portico.process.pid),
      onServerCore: true,
      load: (seconds: number) => ctx.v1(on(i).portico.https, on(i).auth)(seconds),
    })),
    ctx.bare,
    ...(ctx.floor ? [ctx.floor] : []),
    ...NAMES.map((name, i) => ({
      name: floorOn(name),
      pids: () => processTree(on(i).floor.process.pid),
      onServerCore: true,
      load: (seconds: number) => ctx.v1(on(i).floor.port, {})(seconds),
    })),
  ];
  // the floor of each topology: scenario b's on one Redis
  const floorOf = (name: string) => name === 'one Redis' ? ctx.floor?.name : floorOn(name);
  const floors = ['one Redis', ...NAMES].filter((name) => floorOf(name) !== undefined);
  return {
    id: 'topologies' as const,
    title: 'b2. /v1 on each Redis topology: one Redis, Sentinel, Cluster (3 primaries)',
    describe: `as b (wrk -t1 -c${ctx.connections}, GET /v1/categories with a key, ${ctx.v1Body.length}-byte body), one Portico per topology on the server core; Sentinel: a primary, two replicas, three sentinels; Cluster: three primaries with a replica each, all on the load core(s). Acknowledged writes wait for a replica there; the /v1 read makes one limiter round trip, to the primary owning the account's slot`,
    targets,
    ratios: [
      ...['one Redis', ...NAMES].map((name) => ({ label: `Portico ${name} ÷ bare req/s`, num: `Portico /v1, ${name}`, den: ctx.bare.name, metric: 'rps' as const, target: { op: '>=' as const, value: 0.75 } })),
      ...floors.map((name) => ({ label: `floor on ${name} ÷ bare req/s (what the topology costs the bare server)`, num: floorOf(name)!, den: ctx.bare.name, metric: 'rps' as const })),
      ...floors.map((name) => ({ label: `Portico ${name} ÷ floor on ${name} req per CPU-second (Portico's own work)`, num: `Portico /v1, ${name}`, den: floorOf(name)!, metric: 'perCpuSecond' as const })),
      ...NAMES.map((name) => ({ label: `Portico ${name} ÷ Portico one Redis req per CPU-second`, num: `Portico /v1, ${name}`, den: 'Portico /v1, one Redis', metric: 'perCpuSecond' as const })),
    ],
    setup: async () => {
      topologies = await startTopologies(ctx);
    },
    teardown: async () => {
      await topologies?.stop();
      topologies = undefined;
    },
  };
}
