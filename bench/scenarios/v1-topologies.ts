// Scenario b on every Redis topology (DESIGN §9, issue 20): the same authenticated GET /v1/categories
// on a Portico whose state and limiter are on one Redis (scenario b's), through Sentinel (a primary,
// two replicas, three sentinels) and on a three-primary Cluster (a replica each), each against the
// bare Node HTTPS server answering the same body, in the same run. The topologies run on the load
// side's core(s), as scenario b's Redis does; each Portico runs alone on the server core.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { startCluster, startSentinel, type ClusterTopology, type SentinelTopology } from '../../test/helpers/redis-topology.ts';
import { provision, startPortico, type Portico } from '../lib/portico.ts';
import { expectStatus, get } from '../lib/check.ts';
import { processTree, stop } from '../lib/proc.ts';
import type { LoadResult } from '../lib/wrk.ts';

export interface TopologyPortico {
  /** 'Sentinel' or 'Cluster (3 primaries)' */
  topology: string;
  portico: Portico;
  auth: Record<string, string>;
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
    for (const p of porticos) await stop(p.portico.process, 15_000);
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
      const auth = { authorization: `Bearer ${(await provision(portico, opts.originPort)).key}` };
      porticos.push({ topology, portico, auth });
      for (const category of JSON.parse(opts.v1Body.toString('utf8')) as Array<{ name: string; description: string }>) {
        await expectStatus(`POST /v1/categories (${topology})`, get({ scheme: 'https', port: portico.https, hostname: 'api.localhost', path: '/v1/categories', method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ name: category.name, description: category.description }) }), 201);
      }
      const answer = await expectStatus(`GET /v1/categories (${topology})`, get({ scheme: 'https', port: portico.https, hostname: 'api.localhost', path: '/v1/categories', headers: auth }), 200);
      if (answer.body.length !== opts.v1Body.length) throw new Error(`Portico on ${topology} answers ${answer.body.length} bytes for /v1/categories, the one on one Redis ${opts.v1Body.length}`);
    }
    return { porticos, stop: stopAll };
  } catch (err) {
    await stopAll();
    throw err;
  }
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
  ];
  return {
    id: 'topologies' as const,
    title: 'b2. /v1 on each Redis topology: one Redis, Sentinel, Cluster (3 primaries)',
    describe: `as b (wrk -t1 -c${ctx.connections}, GET /v1/categories with a key, ${ctx.v1Body.length}-byte body), one Portico per topology on the server core; Sentinel: a primary, two replicas, three sentinels; Cluster: three primaries with a replica each, all on the load core(s). Acknowledged writes wait for a replica there; the /v1 read makes one limiter round trip, to the primary owning the account's slot`,
    targets,
    ratios: [
      ...['one Redis', ...NAMES].map((name) => ({ label: `Portico ${name} ÷ bare req/s`, num: `Portico /v1, ${name}`, den: ctx.bare.name, metric: 'rps' as const, target: { op: '>=' as const, value: 0.75 } })),
      ...(ctx.floor ? ['one Redis', ...NAMES].map((name) => ({ label: `Portico ${name} ÷ floor req per CPU-second`, num: `Portico /v1, ${name}`, den: ctx.floor!.name, metric: 'perCpuSecond' as const })) : []),
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
