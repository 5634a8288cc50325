// i. Instructions per /v1 request and per full TLS handshake under callgrind (bench/lib/callgrind.ts),
// for the two targets whose CPU-second ratios swing most between runs here (b: /v1 ≥ 0.75× the bare
// Node server; d: handshakes ≥ 1.0× the bare undici proxy). Portico (on the run's Redis, then on
// Sentinel and on a Cluster, as in b2), the bare Node HTTPS server, the
// same server making /v1's limiter call (the floor) and the bare undici proxy (with Node's defaults
// and with Portico's heap flags) each run under valgrind, one after the other, on the run's Redis
// state and origin; each gets a warm-up, then a counted load of a fixed number of requests. The
// ratios are the other way up from the counts (fewer instructions → a higher ratio), to read like the
// per-CPU-second ones. Opt-in (BENCH_ONLY=instructions): it takes 10–15 minutes.
import path from 'node:path';
import type { ScenarioDefinition } from '../lib/scenario.ts';
import type { BenchContext } from '../lib/context.ts';
import type { Figure } from '../lib/measure.ts';
import { callgrindInstalled, count, prefix, type Counts } from '../lib/callgrind.ts';
import { startBareProxy, startBareServer } from '../lib/bare.ts';
import { startFlags, startPortico } from '../lib/portico.ts';
import { output, stop, wrap, type Spawned } from '../lib/proc.ts';
import { runHandshakes } from '../lib/tls-load.ts';
import { fmt, fmtInt, table } from '../lib/report.ts';
import { HANDSHAKE_GROUPS } from '../lib/settings.ts';
import { spawnSync } from 'node:child_process';
import { startCluster, startSentinel } from '../../test/helpers/redis-topology.ts';
import { seed } from './v1-topologies.ts';

// the main thread is what to read: under valgrind the threads take turns, so V8's background compiler is
// still optimising the request path thousands of requests in (docs/performance.md, "Instructions per request")
const V1 = { warm: 8000, counted: 6000 };
const HANDSHAKES = { warm: 500, counted: 1000 };
const START_MS = 300_000;

export const scenario: ScenarioDefinition = {
  id: 'instructions',
  plan(ctx) {
    const only = (process.env.BENCH_ONLY ?? '').split(',').map((s) => s.trim());
    if (!only.includes('instructions')) return 'opt-in: BENCH_ONLY=instructions (10–15 minutes under valgrind)';
    if (!callgrindInstalled()) return 'valgrind is not installed (apt-get install valgrind)';
    if (!ctx.tools.h2load) return 'h2load is not installed';
    if (!ctx.redisUrl) return 'redis-server is not installed: the counted Portico shares the run\'s Redis state';
    return {
      id: 'instructions',
      title: `i. instructions per /v1 request and per full TLS handshake (callgrind, all threads and the event loop's)`,
      run: () => measure(ctx),
    };
  },
};

type Row = { name: string; per: Counts };

async function measure(ctx: BenchContext): Promise<Figure[]> {
  const dir = ctx.tmp;
  const under = (name: string) => ({ wrapper: prefix(dir, name), timeoutMs: START_MS });
  const v1: Row[] = [];
  const handshakes: Row[] = [];
  const v1Load = (port: number, headers: Record<string, string>) => (n: number) => h1Requests(ctx, port, headers, n);
  const hsLoad = (port: number) => (n: number) => fullHandshakes(ctx, port, n);

  const portico = await startPortico({ dataDir: path.join(dir, 'data-callgrind'), certsDir: ctx.certsDir, logFile: path.join(dir, 'portico-callgrind.log'), cpus: ctx.pinning.server, redisUrl: ctx.redisUrl, timeoutMs: START_MS, wrapper: prefix(dir, 'portico') });
  try {
    v1.push({ name: 'Portico /v1', per: await counted(dir, 'portico', portico.process, V1, v1Load(portico.https, ctx.auth)) });
    handshakes.push({ name: 'Portico (proxy)', per: await counted(dir, 'portico', portico.process, HANDSHAKES, hsLoad(portico.https)) });
  } finally {
    await stop(portico.process, 30_000);
  }
  // the same Portico on Sentinel and on a Cluster: what each topology adds to a /v1 request's work
  for (const [topology, start] of [['Sentinel', startSentinel], ['Cluster (3 primaries)', startCluster]] as const) {
    const id = `portico-${topology.split(' ')[0].toLowerCase()}`;
    const redis = await start();
    try {
      if (ctx.pinning.client) for (const node of [...redis.nodes, ...('sentinels' in redis ? redis.sentinels : [])]) spawnSync('taskset', ['-a', '-p', '-c', ctx.pinning.client, String(node.process.pid)], { stdio: 'ignore' });
      // under valgrind Portico runs ~50× slower: the Cluster's first slot map would not come within the default timeout
      const p = await startPortico({ dataDir: path.join(dir, `data-${id}`), certsDir: ctx.certsDir, logFile: path.join(dir, `${id}.log`), cpus: ctx.pinning.server, redisUrl: redis.url, env: { PORTICO_REDIS_COMMAND_TIMEOUT_MS: '20000' }, timeoutMs: START_MS, wrapper: prefix(dir, id) });
      try {
        const auth = await seed(p, topology, ctx.origin.port, ctx.v1Body);
        v1.push({ name: `Portico /v1, ${topology}`, per: await counted(dir, id, p.process, V1, v1Load(p.https, auth)) });
      } finally {
        await stop(p.process, 30_000);
      }
    } finally {
      await redis.stop();
    }
  }
  for (const [name, redisUrl] of [['bare Node HTTPS', undefined], ['bare Node HTTPS + the limiter call (floor)', ctx.redisUrl]] as const) {
    const id = redisUrl ? 'bare-limited' : 'bare-https';
    const bare = await startBareServer(`${id}-callgrind`, dir, ctx.pinning.server, ctx.portico, ctx.v1Body, 'https', { redisUrl }, under(id));
    try {
      v1.push({ name, per: await counted(dir, id, bare.process, V1, v1Load(bare.port, {})) });
    } finally {
      await stop(bare.process, 30_000);
    }
  }
  for (const [name, flags] of [['bare undici proxy', []], ["bare undici proxy, Portico's heap flags", startFlags()]] as const) {
    const id = flags.length ? 'bare-proxy-flags' : 'bare-proxy';
    const bare = await startBareProxy(ctx.pinning.server, ctx.portico, ctx.origin.port, [...flags], under(id));
    try {
      handshakes.push({ name, per: await counted(dir, id, bare.process, HANDSHAKES, hsLoad(bare.port)) });
    } finally {
      await stop(bare.process, 30_000);
    }
  }

  const rows = (title: string, list: Row[]) => list.map((r) => [`${title}: ${r.name}`, fmtInt(r.per.total), fmtInt(r.per.mainThread)]);
  console.log(table(['server', 'instructions each (all threads)', 'event loop thread'], [...rows(`/v1 (${fmtInt(V1.counted)} after ${fmtInt(V1.warm)})`, v1), ...rows(`handshake (${fmtInt(HANDSHAKES.counted)} after ${fmtInt(HANDSHAKES.warm)})`, handshakes)]));
  const ratio = (label: string, list: Row[], num: string, den: string): Figure[] => {
    const a = list.find((r) => r.name === num)!.per;
    const b = list.find((r) => r.name === den)!.per;
    return [
      { label: `${label}, all threads`, value: b.total / a.total },
      { label: `${label}, event loop thread`, value: b.mainThread / a.mainThread },
    ];
  };
  const figures = [
    ...ratio('/v1 Portico ÷ bare Node HTTPS requests per instruction', v1, 'Portico /v1', 'bare Node HTTPS'),
    ...ratio('/v1 Portico on Sentinel ÷ Portico on one Redis requests per instruction', v1, 'Portico /v1, Sentinel', 'Portico /v1'),
    ...ratio('/v1 Portico on a Cluster ÷ Portico on one Redis requests per instruction', v1, 'Portico /v1, Cluster (3 primaries)', 'Portico /v1'),
    ...ratio('/v1 floor ÷ bare Node HTTPS requests per instruction', v1, 'bare Node HTTPS + the limiter call (floor)', 'bare Node HTTPS'),
    ...ratio('/v1 Portico ÷ floor requests per instruction', v1, 'Portico /v1', 'bare Node HTTPS + the limiter call (floor)'),
    ...ratio('Portico ÷ bare undici proxy handshakes per instruction', handshakes, 'Portico (proxy)', 'bare undici proxy'),
    ...ratio("Portico ÷ bare undici proxy with Portico's heap flags handshakes per instruction", handshakes, 'Portico (proxy)', "bare undici proxy, Portico's heap flags"),
  ];
  for (const f of figures) console.log(`  ${f.label}: ${fmt(f.value)}`);
  return figures;
}

/** a warm-up, then the counted load; instructions per request */
async function counted(dir: string, name: string, server: Spawned, sizes: { warm: number; counted: number }, load: (n: number) => Promise<void>): Promise<Counts> {
  await load(sizes.warm);
  const counts = await count(dir, name, server.pid, () => load(sizes.counted));
  return { total: counts.total / sizes.counted, mainThread: counts.mainThread / sizes.counted };
}

/** exactly `n` GET /v1/categories over HTTP/1.1 keep-alive (h2load --h1, 10 connections); all must be 200 */
async function h1Requests(ctx: BenchContext, port: number, headers: Record<string, string>, n: number): Promise<void> {
  const args = ['--h1', '-n', String(n), '-c', '10', '-t', '1', `--connect-to=127.0.0.1:${port}`, ...Object.entries(headers).flatMap(([k, v]) => ['-H', `${k}: ${v}`]), `https://api.localhost:${port}/v1/categories`];
  const [cmd, argv] = wrap(ctx.pinning.client, 'h2load', args);
  const out = await output(cmd, argv, 'h2load');
  const ok = /status codes: (\d+) 2xx/.exec(out);
  if (!ok || Number(ok[1]) !== n) throw new Error(`h2load: ${n} requests asked for, not all answered 2xx:\n${out}`);
}

/** exactly `n` full handshakes with GET / (Connection: close) to the bench project; all must be 200 */
async function fullHandshakes(ctx: BenchContext, port: number, n: number): Promise<void> {
  const r = await runHandshakes({ port, servername: 'bench.localhost', hostHeader: 'bench.localhost', path: '/', concurrency: 8, seconds: 3600, maxRequests: n, resume: false, groups: HANDSHAKE_GROUPS, cpus: ctx.pinning.client });
  if (r.errors || r.requests !== n) throw new Error(`handshakes: ${n} asked for, ${r.requests} done (${r.errorDetail || 'no errors'})`);
}
