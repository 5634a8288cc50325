// h2. HTTP/2 throughput: scenario a's route over HTTP/2 (h2load, 50 connections × N streams, 100-byte
// answers), against nginx's h2 and the bare Node anchors on the same listener kind: a server
// answering itself (the ceiling of Node's HTTP/2 here) and an undici proxy (the least a Node h2 proxy
// does). Portico over HTTP/1.1 in the same run shows what HTTP/2 costs it. `h2` runs at
// BENCH_H2_STREAMS (10) streams per connection, `h2-1` at one.
import type { ScenarioDefinition } from '../lib/scenario.ts';
import { clearLogs, h2load, pidsOf, wrk, type BenchContext } from '../lib/context.ts';
import type { Measured, Ratio, Target } from '../lib/measure.ts';
import { startBareServer, type Bare } from '../lib/bare.ts';
import { stop } from '../lib/proc.ts';
import { BODY } from '../lib/origin.ts';
import { CONNECTIONS, H2_CLIENTS, H2_STREAMS } from '../lib/settings.ts';

function plan(ctx: BenchContext, id: string, streams: number): Measured | string {
  if (!ctx.tools.h2load) return 'h2load is not installed (Debian nghttp2-client)';
  const { portico, nginx, bareProxy } = ctx;
  let bare: Bare | undefined;
  const tag = `m${streams}`;
  const targets: Target[] = [{ name: 'Portico h2', pids: pidsOf(portico.process), onServerCore: true, before: clearLogs(ctx), load: h2load(ctx, portico.https, `portico-${tag}`, { streams }) }];
  if (nginx) targets.push({ name: 'nginx h2', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs(ctx), load: h2load(ctx, nginx.https, `nginx-${tag}`, { streams }) });
  else ctx.skip(`${id}: nginx unavailable`);
  targets.push(
    { name: 'bare Node h2 server (answers itself)', pids: () => pidsOf(bare!.process)(), onServerCore: true, load: (s, mark) => h2load(ctx, bare!.port, `bare-${tag}`, { streams })(s, mark) },
    { name: 'bare undici proxy h2 (info)', pids: pidsOf(bareProxy.process), onServerCore: true, load: h2load(ctx, bareProxy.port, `bare-proxy-${tag}`, { streams }) },
  );
  if (streams > 1 && ctx.tools.wrk) targets.push({ name: 'Portico HTTP/1.1 (wrk, info)', pids: pidsOf(portico.process), onServerCore: true, before: clearLogs(ctx), load: wrk(ctx, portico.https, 'bench.localhost', '/') });
  const ratios: Ratio[] = [{ label: 'Portico ÷ bare Node h2 server req per CPU-second', num: 'Portico h2', den: 'bare Node h2 server (answers itself)', metric: 'perCpuSecond', target: { op: '>=', value: 0.6 } }];
  if (nginx) {
    ratios.push(
      { label: 'Portico ÷ nginx h2 req per CPU-second', num: 'Portico h2', den: 'nginx h2', metric: 'perCpuSecond', target: { op: '>=', value: 0.3 } },
      { label: 'Portico ÷ nginx h2 req/s', num: 'Portico h2', den: 'nginx h2', metric: 'rps' },
      { label: 'bare Node h2 server ÷ nginx h2 req per CPU-second', num: 'bare Node h2 server (answers itself)', den: 'nginx h2', metric: 'perCpuSecond' },
    );
  }
  ratios.push(
    // the floor: what a Node h2 proxy with nothing else to do reaches against the same ceiling
    { label: 'bare undici proxy h2 ÷ bare Node h2 server req per CPU-second (a Node h2 proxy\'s floor)', num: 'bare undici proxy h2 (info)', den: 'bare Node h2 server (answers itself)', metric: 'perCpuSecond' },
    { label: 'Portico ÷ bare undici proxy h2 req per CPU-second', num: 'Portico h2', den: 'bare undici proxy h2 (info)', metric: 'perCpuSecond' },
    { label: 'Portico h2 ÷ Portico HTTP/1.1 req per CPU-second', num: 'Portico h2', den: 'Portico HTTP/1.1 (wrk, info)', metric: 'perCpuSecond' },
  );
  return {
    id,
    title: `${id}. HTTP/2 throughput, ${streams} stream${streams === 1 ? '' : 's'} per connection (bench.localhost → loopback origin, as in a)`,
    describe: `h2load -t1 -c${H2_CLIENTS} -m${streams} (${H2_CLIENTS * streams} streams in flight; its own 1 s warm-up, then -D, CPU read over the main duration), TLS + ALPN h2, SNI bench.localhost (--connect-to 127.0.0.1), ${BODY.length}-byte answers; upstreams stay HTTP/1.1 keep-alive. The bare Node h2 server answers the same ${BODY.length} bytes itself${streams > 1 ? `; the HTTP/1.1 row is wrk -t1 -c${CONNECTIONS} as in a` : ''}. Latencies are h2load's per-request log`,
    targets,
    ratios,
    setup: async () => {
      bare = await startBareServer(`bare-h2-${tag}`, ctx.tmp, ctx.pinning.server, portico, Buffer.from(BODY), 'h2');
    },
    teardown: async () => stop(bare?.process),
  };
}

export const scenario: ScenarioDefinition = { id: 'h2', plan: (ctx) => plan(ctx, 'h2', H2_STREAMS) };
export const oneStream: ScenarioDefinition = { id: 'h2-1', plan: (ctx) => plan(ctx, 'h2-1', 1) };
