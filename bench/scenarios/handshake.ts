// d. Full TLS handshake per request (a Node client that never offers a session), against the bare
// undici proxy (DESIGN §9: Portico's listener kind proxying with nothing else), with nginx and the
// bare Node server (answering itself) beside it.
import type { ScenarioDefinition } from '../lib/scenario.ts';
import { clearLogs, handshakes, pidsOf } from '../lib/context.ts';
import type { Ratio, Target } from '../lib/measure.ts';
import { HANDSHAKE_CONCURRENCY, HANDSHAKE_GROUPS } from '../lib/settings.ts';
import { startBareProxy, type Bare } from '../lib/bare.ts';
import { startFlags } from '../lib/portico.ts';
import { stop } from '../lib/proc.ts';

const SAME_FLAGS = 'bare undici proxy, Portico\'s heap flags (info)';

export const scenario: ScenarioDefinition = {
  id: 'handshake',
  plan(ctx) {
    const { portico, nginx, bare, bareProxy, variant } = ctx;
    const targets: Target[] = [{ name: 'Portico (proxy)', pids: pidsOf(portico.process), onServerCore: true, before: clearLogs(ctx), load: handshakes(ctx, portico.https, 'bench.localhost', '/', false) }];
    // the least a Node proxy does per connection, on Portico's listener kind: the target
    targets.push({ name: 'bare undici proxy', pids: pidsOf(bareProxy.process), onServerCore: true, load: handshakes(ctx, bareProxy.port, 'bench.localhost', '/', false) });
    // the same proxy under the V8 flags Portico ships with (npm start): what is left is Portico's own
    // per-connection work, apart from the memory bound those flags buy (docs/performance.md)
    let sameFlags: Bare | undefined;
    targets.push({ name: SAME_FLAGS, pids: () => pidsOf(sameFlags!.process)(), onServerCore: true, load: (s, mark) => handshakes(ctx, sameFlags!.port, 'bench.localhost', '/', false)(s, mark) });
    if (nginx) targets.push({ name: 'nginx (proxy, info)', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs(ctx), load: handshakes(ctx, nginx.https, 'bench.localhost', '/', false) });
    else ctx.skip('d. full handshakes vs nginx: nginx unavailable');
    targets.push({ name: 'bare Node HTTPS (answers itself, info)', pids: pidsOf(bare.process), onServerCore: true, load: handshakes(ctx, bare.port, 'bench.localhost', '/', false) });
    if (variant) targets.push({ name: 'Portico (proxy, variant)', pids: pidsOf(variant.process), onServerCore: true, load: handshakes(ctx, variant.https, 'bench.localhost', '/', false) });
    const ratios: Ratio[] = [
      { label: 'Portico ÷ bare undici proxy handshakes per CPU-second', num: 'Portico (proxy)', den: 'bare undici proxy', metric: 'perCpuSecond', target: { op: '>=', value: 1 } },
      { label: `Portico ÷ bare undici proxy with Portico's heap flags (${startFlags().join(' ')}) handshakes per CPU-second`, num: 'Portico (proxy)', den: SAME_FLAGS, metric: 'perCpuSecond' },
    ];
    if (nginx) {
      ratios.push(
        { label: 'Portico ÷ nginx handshakes per CPU-second', num: 'Portico (proxy)', den: 'nginx (proxy, info)', metric: 'perCpuSecond' },
        { label: 'Portico ÷ nginx req/s (client-bound when both CPU% < 100)', num: 'Portico (proxy)', den: 'nginx (proxy, info)', metric: 'rps' },
        { label: 'Portico ÷ nginx p99', num: 'Portico (proxy)', den: 'nginx (proxy, info)', metric: 'p99ms' },
        { label: 'bare undici proxy ÷ nginx handshakes per CPU-second', num: 'bare undici proxy', den: 'nginx (proxy, info)', metric: 'perCpuSecond' },
        { label: 'bare Node HTTPS (answers itself) ÷ nginx handshakes per CPU-second', num: 'bare Node HTTPS (answers itself, info)', den: 'nginx (proxy, info)', metric: 'perCpuSecond' },
      );
    }
    ratios.push({ label: 'Portico ÷ bare Node HTTPS handshakes per CPU-second', num: 'Portico (proxy)', den: 'bare Node HTTPS (answers itself, info)', metric: 'perCpuSecond' });
    if (variant) ratios.push({ label: 'variant ÷ Portico handshakes per CPU-second', num: 'Portico (proxy, variant)', den: 'Portico (proxy)', metric: 'perCpuSecond' });
    return {
      id: 'handshake',
      title: 'd. full TLS handshake per request (no session offered)',
      describe: `bench/tls-client.ts, ${HANDSHAKE_CONCURRENCY} concurrent loops of connect (TLS 1.3, ${HANDSHAKE_GROUPS}, ECDSA P-256) → GET / (Connection: close) → close, on the load core. The client may be the bottleneck, so "req/CPU-s" (handshakes per second of server CPU) is the per-core figure`,
      targets,
      ratios,
      setup: async () => {
        sameFlags = await startBareProxy(ctx.pinning.server, portico, ctx.origin.port, startFlags());
      },
      teardown: async () => stop(sameFlags?.process),
    };
  },
};
