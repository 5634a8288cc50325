// k. Cluster: `portico serve --workers N` on Redis state, scenario a's proxy keep-alive through its own
// project on an origin with a worker per load core; N workers on cores 0…N-1 and the load on the rest,
// N up to half the cores. With 2 cores both N = 1 and 2 run on core 0: the per-core cost of N
// workers, not the slope.
import path from 'node:path';
import type { ScenarioDefinition } from '../lib/scenario.ts';
import { expand } from '../lib/measure.ts';
import type { Target } from '../lib/measure.ts';
import { portFromStdout, processTree, spawnPinned, stop, type Pinning, type Spawned } from '../lib/proc.ts';
import { runWrk } from '../lib/wrk.ts';
import { admin, startPortico, type Portico } from '../lib/portico.ts';
import { expectStatus, get } from '../lib/check.ts';
import { CONNECTIONS } from '../lib/settings.ts';

const BENCH = path.resolve(import.meta.dirname, '..');

/**
 * The steps of the cluster curve: N workers on cores 0…N-1 and the load on the rest, N up to half the
 * cores (the load side needs about as many cores as Portico: wrk and the origin). With 2 cores there
 * is no free core for a second worker: N = 1 and 2 both run on core 0.
 */
function clusterPlan(pinning: Pinning, cores: number): Array<{ workers: number; server: string; client: string }> {
  if (!pinning.server || cores < 2) return [];
  if (cores < 4) return [1, 2].map((workers) => ({ workers, server: '0', client: cores === 2 ? '1' : `1-${cores - 1}` }));
  return Array.from({ length: Math.floor(cores / 2) }, (_, i) => ({ workers: i + 1, server: i === 0 ? '0' : `0-${i}`, client: `${i + 1}-${cores - 1}` }));
}

const clusterName = (workers: number) => `Portico, ${workers} worker${workers === 1 ? '' : 's'}`;

export const scenario: ScenarioDefinition = {
  id: 'cluster',
  plan(ctx) {
    const { cores, tmp, certsDir, redisUrl, resolution } = ctx;
    const plan = clusterPlan(ctx.pinning, cores);
    if (!ctx.tools.wrk || !redisUrl || plan.length === 0) {
      return `k. cluster: needs ${[!ctx.tools.wrk && 'wrk', !redisUrl && 'redis-server (workers share state through Redis)', plan.length === 0 && 'taskset and 2 cores'].filter(Boolean).join(', ')}`;
    }
    // its own origin, with a worker per load core, so the origin is not what the curve measures;
    // it and the Porticos run only while this scenario does
    const loadCores = plan[plan.length - 1].client;
    const spawned: Spawned[] = [];
    const servers = new Map<number, Portico>();
    const setup = async () => {
      const clusterOrigin = spawnPinned('origin-cluster', loadCores, process.execPath, [path.join(BENCH, 'origin.ts')], { env: { ...process.env, WORKERS: String(expand(loadCores).length) }, stdio: ['ignore', 'pipe', 'inherit'] });
      spawned.push(clusterOrigin);
      const clusterOriginPort = await portFromStdout(clusterOrigin);
      for (const step of plan) {
        const p = await startPortico({ dataDir: path.join(tmp, `data-cluster-${step.workers}`), certsDir, logFile: path.join(tmp, `portico-cluster-${step.workers}.log`), cpus: step.server, redisUrl, serveArgs: ['--workers', String(step.workers)] });
        spawned.push(p.process);
        servers.set(step.workers, p);
        // one worker is the process itself; more are a primary's children
        const processes = processTree(p.process.pid).length;
        if (processes !== (step.workers === 1 ? 1 : step.workers + 1)) throw new Error(`portico serve --workers ${step.workers} runs ${processes} processes`);
        if (step.workers === 1) {
          // the state is in Redis: one project on the cluster origin serves every one of these Porticos
          const account = await admin<{ id: string }>(p, 'POST', '/admin/accounts', { plan: 'pro' });
          await admin(p, 'POST', '/admin/projects', { accountId: account.id, name: 'cluster', upstream: `http://127.0.0.1:${clusterOriginPort}` });
        }
        await expectStatus(`${clusterName(step.workers)} → origin`, get({ scheme: 'https', port: p.https, hostname: 'cluster.localhost', path: '/' }), 200);
      }
    };
    const teardown = async () => {
      for (const p of spawned.reverse()) await stop(p, 15_000);
    };
    const targets: Target[] = plan.map((step) => ({
      name: clusterName(step.workers),
      pids: () => processTree(servers.get(step.workers)!.process.pid),
      onServerCore: step.server === '0',
      load: (seconds: number) => runWrk({ scheme: 'https', hostname: 'cluster.localhost', port: servers.get(step.workers)!.https, path: '/', connections: CONNECTIONS * step.workers, threads: Math.min(expand(step.client).length, CONNECTIONS * step.workers), seconds, cpus: step.client, resolution }),
    }));
    const shared = plan.every((step) => step.server === '0');
    return {
      id: 'cluster',
      title: 'k. cluster: `portico serve --workers N` (Redis state), proxy keep-alive as in a',
      describe: shared
        ? `${cores} cores: no free core for a second worker, so every N runs on core 0 and the load on core${cores === 2 ? '' : 's'} ${plan[0].client}. The workers then also take turns on one core, so "N ÷ 1 per CPU-second" is the most running N workers can cost per core; how throughput grows with cores needs 4 or more`
        : `N workers on cores ${plan.map((s) => s.server).join(' / ')}, wrk (one thread per load core, ${CONNECTIONS} connections per worker) and an origin with a worker per load core on the others: the curve of req/s against N`,
      targets,
      setup,
      teardown,
      ratios: plan.slice(1).flatMap((step) => [
        { label: `${step.workers} workers ÷ 1 worker req/s`, num: clusterName(step.workers), den: clusterName(1), metric: 'rps' as const },
        { label: `${step.workers} workers ÷ 1 worker req per CPU-second`, num: clusterName(step.workers), den: clusterName(1), metric: 'perCpuSecond' as const },
      ]),
    };
  },
};
