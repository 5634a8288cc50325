// h2p. HTTP/2 latency at equal load: h2load paced (--rps per connection) at a rate Portico and nginx
// both carry, so p50/p99 are service times rather than the queue behind a saturated core. The bare
// Node h2 server (answering itself) and the bare undici proxy over h2 show what Node's HTTP/2 itself
// gives at the same load: the floor of the p99 ratio.
import type { ScenarioDefinition } from '../lib/scenario.ts';
import { clearLogs, h2load, pidsOf } from '../lib/context.ts';
import { startBareServer, type Bare } from '../lib/bare.ts';
import { stop } from '../lib/proc.ts';
import { BODY } from '../lib/origin.ts';
import { fmtInt } from '../lib/report.ts';
import { H2_CLIENTS, H2_STREAMS, PACE_MS } from '../lib/settings.ts';

export const scenario: ScenarioDefinition = {
  id: 'h2-paced',
  plan(ctx) {
    if (!ctx.tools.h2load) return 'h2load is not installed (Debian nghttp2-client)';
    if (!ctx.nginx) return 'nginx unavailable: the paced HTTP/2 p99 is judged against nginx';
    const rps = Math.max(1, Math.round(1000 / PACE_MS));
    const paced = { rps, streams: H2_STREAMS };
    let bare: Bare | undefined;
    return {
      id: 'h2-paced',
      title: 'h2p. HTTP/2 latency at equal load (h2 paced below saturation)',
      describe: `h2load -t1 -c${H2_CLIENTS} -m${H2_STREAMS} --rps=${rps} (≈ ${fmtInt(H2_CLIENTS * rps)} req/s offered to each server); p50/p99 from h2load's per-request log`,
      targets: [
        { name: 'Portico h2, paced', pids: pidsOf(ctx.portico.process), onServerCore: true, before: clearLogs(ctx), load: h2load(ctx, ctx.portico.https, 'portico-paced', paced) },
        { name: 'nginx h2, paced', pids: pidsOf(ctx.nginx.process), onServerCore: true, before: clearLogs(ctx), load: h2load(ctx, ctx.nginx.https, 'nginx-paced', paced) },
        { name: 'bare Node h2 server, paced (info)', pids: () => pidsOf(bare!.process)(), onServerCore: true, load: (s, mark) => h2load(ctx, bare!.port, 'bare-paced', paced)(s, mark) },
        { name: 'bare undici proxy h2, paced (info)', pids: pidsOf(ctx.bareProxy.process), onServerCore: true, load: h2load(ctx, ctx.bareProxy.port, 'bare-proxy-paced', paced) },
      ],
      ratios: [
        { label: 'Portico ÷ nginx h2 p99 at equal load', num: 'Portico h2, paced', den: 'nginx h2, paced', metric: 'p99ms', target: { op: '<=', value: 2 } },
        { label: 'Portico ÷ nginx h2 req/s (the same offered load: ≈ 1)', num: 'Portico h2, paced', den: 'nginx h2, paced', metric: 'rps' },
        { label: 'bare Node h2 server ÷ nginx h2 p99 at equal load (Node\'s floor)', num: 'bare Node h2 server, paced (info)', den: 'nginx h2, paced', metric: 'p99ms' },
        { label: 'bare undici proxy h2 ÷ nginx h2 p99 at equal load', num: 'bare undici proxy h2, paced (info)', den: 'nginx h2, paced', metric: 'p99ms' },
        { label: 'Portico ÷ bare Node h2 server p99 at equal load', num: 'Portico h2, paced', den: 'bare Node h2 server, paced (info)', metric: 'p99ms' },
      ],
      setup: async () => {
        bare = await startBareServer('bare-h2-paced', ctx.tmp, ctx.pinning.server, ctx.portico, Buffer.from(BODY), 'h2');
      },
      teardown: async () => stop(bare?.process),
    };
  },
};
