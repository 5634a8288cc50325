// p. Latency at equal load: scenarios a and b again, but each wrk connection pauses BENCH_PACE_MS
// between an answer and its next request, so every server gets the same offered load below
// saturation; p50/p99 there are service times, not the queue behind a full core.
import type { ScenarioDefinition } from '../lib/scenario.ts';
import { clearLogs, pidsOf, wrk } from '../lib/context.ts';
import type { Ratio, Target } from '../lib/measure.ts';
import { fmtInt } from '../lib/report.ts';
import { CONNECTIONS, PACE_MS } from '../lib/settings.ts';

export const scenario: ScenarioDefinition = {
  id: 'paced',
  plan(ctx) {
    if (!ctx.tools.wrk) return 'wrk is not installed';
    const { portico, nginx, variant, bare, auth } = ctx;
    const paced = { paceMs: PACE_MS };
    const targets: Target[] = [{ name: 'Portico → origin, paced', pids: pidsOf(portico.process), onServerCore: true, before: clearLogs(ctx), load: wrk(ctx, portico.https, 'bench.localhost', '/', paced) }];
    const ratios: Ratio[] = [];
    if (nginx) {
      targets.push({ name: 'nginx → origin, paced', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs(ctx), load: wrk(ctx, nginx.https, 'bench.localhost', '/', paced) });
      ratios.push(
        { label: 'Portico ÷ nginx p99 at equal load', num: 'Portico → origin, paced', den: 'nginx → origin, paced', metric: 'p99ms', target: { op: '<=', value: 2 } },
        { label: 'Portico ÷ nginx req/s (the same offered load: ≈ 1)', num: 'Portico → origin, paced', den: 'nginx → origin, paced', metric: 'rps' },
      );
    } else ctx.skip('p. paced proxy vs nginx: nginx unavailable');
    if (variant) {
      targets.push({ name: 'Portico → origin, paced (variant)', pids: pidsOf(variant.process), onServerCore: true, load: wrk(ctx, variant.https, 'bench.localhost', '/', paced) });
      ratios.push({ label: 'variant ÷ Portico p99 at equal load (proxy)', num: 'Portico → origin, paced (variant)', den: 'Portico → origin, paced', metric: 'p99ms' });
    }
    if (ctx.redisUrl) {
      targets.push(
        { name: 'Portico /v1, paced', pids: pidsOf(portico.process), onServerCore: true, before: clearLogs(ctx), load: wrk(ctx, portico.https, 'api.localhost', '/v1/categories', { headers: auth, ...paced }) },
        { name: 'bare Node HTTPS, paced', pids: pidsOf(bare.process), onServerCore: true, load: wrk(ctx, bare.port, 'api.localhost', '/v1/categories', paced) },
      );
      ratios.push({ label: 'Portico /v1 ÷ bare p99 at equal load', num: 'Portico /v1, paced', den: 'bare Node HTTPS, paced', metric: 'p99ms', target: { op: '<=', value: 2 } });
      if (variant) {
        targets.push({ name: 'Portico /v1, paced (variant)', pids: pidsOf(variant.process), onServerCore: true, load: wrk(ctx, variant.https, 'api.localhost', '/v1/categories', { headers: auth, ...paced }) });
        ratios.push({ label: 'variant ÷ Portico p99 at equal load (/v1)', num: 'Portico /v1, paced (variant)', den: 'Portico /v1, paced', metric: 'p99ms' });
      }
    }
    return {
      id: 'paced',
      title: 'p. latency at equal load (a and b paced below saturation)',
      describe: `wrk -t1 -c${CONNECTIONS}, each connection pausing ${PACE_MS} ms between an answer and its next request (≈ ${fmtInt((CONNECTIONS * 1000) / PACE_MS)} req/s offered to every server); p50/p99 are then service times, not the queue behind a saturated core`,
      targets,
      ratios,
    };
  },
};
