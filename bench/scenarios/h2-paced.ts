// h2p. HTTP/2 latency at equal load: h2load paced (--rps per connection) at a rate Portico and nginx
// both carry, so p50/p99 are service times rather than the queue behind a saturated core.
import type { ScenarioDefinition } from '../lib/scenario.ts';
import { clearLogs, h2load, pidsOf } from '../lib/context.ts';
import { fmtInt } from '../lib/report.ts';
import { H2_CLIENTS, H2_STREAMS, PACE_MS } from '../lib/settings.ts';

export const scenario: ScenarioDefinition = {
  id: 'h2-paced',
  plan(ctx) {
    if (!ctx.tools.h2load) return 'h2load is not installed (Debian nghttp2-client)';
    if (!ctx.nginx) return 'nginx unavailable: the paced HTTP/2 p99 is judged against nginx';
    const rps = Math.max(1, Math.round(1000 / PACE_MS));
    const paced = { rps, streams: H2_STREAMS };
    return {
      id: 'h2-paced',
      title: 'h2p. HTTP/2 latency at equal load (h2 paced below saturation)',
      describe: `h2load -t1 -c${H2_CLIENTS} -m${H2_STREAMS} --rps=${rps} (≈ ${fmtInt(H2_CLIENTS * rps)} req/s offered to each server); p50/p99 from h2load's per-request log`,
      targets: [
        { name: 'Portico h2, paced', pids: pidsOf(ctx.portico.process), onServerCore: true, before: clearLogs(ctx), load: h2load(ctx, ctx.portico.https, 'portico-paced', paced) },
        { name: 'nginx h2, paced', pids: pidsOf(ctx.nginx.process), onServerCore: true, before: clearLogs(ctx), load: h2load(ctx, ctx.nginx.https, 'nginx-paced', paced) },
      ],
      ratios: [
        { label: 'Portico ÷ nginx h2 p99 at equal load', num: 'Portico h2, paced', den: 'nginx h2, paced', metric: 'p99ms', target: { op: '<=', value: 2 } },
        { label: 'Portico ÷ nginx h2 req/s (the same offered load: ≈ 1)', num: 'Portico h2, paced', den: 'nginx h2, paced', metric: 'rps' },
      ],
    };
  },
};
