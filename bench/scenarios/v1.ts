// b. /v1: authenticated GET /v1/categories (Redis state and limiter) against a bare Node HTTPS server
// answering the same bytes itself; informational: the same bare server making /v1's one rate-limit
// call before it answers (Portico's RedisLimiter, nothing else of Portico's: the floor of a /v1 request
// on Redis), the same bare server writing its answers after the turn's reads (as Portico and the floor
// do: their answers leave together, not one between two reads), and a Portico on embedded state (what
// `npm start` runs).
import type { ScenarioDefinition } from '../lib/scenario.ts';
import { clearLogs, pidsOf, truncate, wrk } from '../lib/context.ts';
import type { Ratio, Target } from '../lib/measure.ts';
import { CONNECTIONS } from '../lib/settings.ts';
import { topologiesScenario } from './v1-topologies.ts';

export const scenario: ScenarioDefinition = {
  id: 'v1',
  plan(ctx) {
    if (!ctx.tools.wrk) return 'wrk is not installed';
    if (!ctx.redisUrl) return 'b. /v1 with the Redis limiter: redis-server is not installed';
    const { portico, bare, variant, embedded, auth } = ctx;
    const targets: Target[] = [
      { name: 'Portico /v1', pids: pidsOf(portico.process), onServerCore: true, before: clearLogs(ctx), load: wrk(ctx, portico.https, 'api.localhost', '/v1/categories', { headers: auth }) },
      { name: 'bare Node HTTPS', pids: pidsOf(bare.process), onServerCore: true, load: wrk(ctx, bare.port, 'api.localhost', '/v1/categories') },
    ];
    const floor = 'bare Node HTTPS + the limiter call (floor)';
    if (ctx.bareLimited) targets.push({ name: floor, pids: pidsOf(ctx.bareLimited.process), onServerCore: true, load: wrk(ctx, ctx.bareLimited.port, 'api.localhost', '/v1/categories') });
    const batched = 'bare Node HTTPS, answers after the turn\'s reads (info)';
    if (ctx.bareAfterReads) targets.push({ name: batched, pids: pidsOf(ctx.bareAfterReads.process), onServerCore: true, load: wrk(ctx, ctx.bareAfterReads.port, 'api.localhost', '/v1/categories') });
    if (variant) targets.push({ name: 'Portico /v1 (variant)', pids: pidsOf(variant.process), onServerCore: true, load: wrk(ctx, variant.https, 'api.localhost', '/v1/categories', { headers: auth }) });
    if (embedded) targets.push({ name: 'Portico /v1, embedded state (info)', pids: pidsOf(embedded.portico.process), onServerCore: true, before: truncate(embedded.portico.logFile), load: wrk(ctx, embedded.portico.https, 'api.localhost', '/v1/categories', { headers: embedded.auth }) });
    const ratios: Ratio[] = [
      { label: 'Portico ÷ bare req/s', num: 'Portico /v1', den: 'bare Node HTTPS', metric: 'rps', target: { op: '>=', value: 0.75 } },
      { label: 'Portico ÷ bare p99', num: 'Portico /v1', den: 'bare Node HTTPS', metric: 'p99ms', target: { op: '<=', value: 2 } },
      { label: 'Portico ÷ bare req per CPU-second', num: 'Portico /v1', den: 'bare Node HTTPS', metric: 'perCpuSecond' },
      { label: 'floor ÷ bare req per CPU-second (the limiter round trip alone)', num: floor, den: 'bare Node HTTPS', metric: 'perCpuSecond' },
      { label: 'Portico ÷ floor req per CPU-second (Portico\'s own work)', num: 'Portico /v1', den: floor, metric: 'perCpuSecond' },
      { label: 'bare, answers after the turn\'s reads ÷ bare req per CPU-second', num: batched, den: 'bare Node HTTPS', metric: 'perCpuSecond' },
      { label: 'floor ÷ bare answering after the turn\'s reads, req per CPU-second (the Redis round trip\'s cost)', num: floor, den: batched, metric: 'perCpuSecond' },
      { label: 'Portico embedded ÷ bare req/s', num: 'Portico /v1, embedded state (info)', den: 'bare Node HTTPS', metric: 'rps' },
      { label: 'Portico embedded ÷ Portico Redis req per CPU-second', num: 'Portico /v1, embedded state (info)', den: 'Portico /v1', metric: 'perCpuSecond' },
    ];
    return {
      id: 'v1',
      title: 'b. /v1 authenticated GET /v1/categories (Redis state and limiter)',
      describe: `wrk -t1 -c${CONNECTIONS}, HTTPS keep-alive, Authorization: Bearer <key>, ${ctx.v1Body.length}-byte JSON body; the bare Node HTTPS server answers the same body itself`,
      targets,
      ratios,
    };
  },
};

/** b2. /v1 on each Redis topology (v1-topologies.ts): scenario b's Portico and bare server beside a Portico on Sentinel and on a Cluster */
export const topologies: ScenarioDefinition = {
  id: 'topologies',
  plan(ctx) {
    if (!ctx.tools.wrk) return 'wrk is not installed';
    if (!ctx.redisUrl) return 'redis-server is not installed';
    return topologiesScenario({
      tmp: ctx.tmp,
      certsDir: ctx.certsDir,
      originPort: ctx.origin.port,
      serverCpus: ctx.pinning.server,
      clientCpus: ctx.pinning.client,
      v1Body: ctx.v1Body,
      connections: CONNECTIONS,
      oneRedis: { name: 'Portico /v1', pids: pidsOf(ctx.portico.process), onServerCore: true, before: clearLogs(ctx), load: wrk(ctx, ctx.portico.https, 'api.localhost', '/v1/categories', { headers: ctx.auth }) },
      bare: { name: 'bare Node HTTPS', pids: pidsOf(ctx.bare.process), onServerCore: true, load: wrk(ctx, ctx.bare.port, 'api.localhost', '/v1/categories') },
      floor: ctx.bareLimited && { name: 'bare Node HTTPS + the limiter call (floor)', pids: pidsOf(ctx.bareLimited.process), onServerCore: true, load: wrk(ctx, ctx.bareLimited.port, 'api.localhost', '/v1/categories') },
      v1: (port, headers) => wrk(ctx, port, 'api.localhost', '/v1/categories', { headers }),
    });
  },
};
