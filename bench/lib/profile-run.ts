// BENCH_PROFILE=proxy|v1|handshake|h2: after the scenarios, one more Portico run under `node --cpu-prof`;
// the top self-time functions and modules are printed and the .cpuprofile kept in bench/results/.
import { copyFileSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { sleep, stop, type Pinning } from './proc.ts';
import { runWrk, type Resolution } from './wrk.ts';
import { runHandshakes } from './tls-load.ts';
import { h2loadLog, runH2load } from './h2load.ts';
import type { Portico } from './portico.ts';
import { summarizeProfile } from './profile.ts';
import { fmt, fmtInt, table } from './report.ts';
import { CONNECTIONS, H2_CLIENTS, H2_STREAMS, HANDSHAKE_CONCURRENCY, HANDSHAKE_GROUPS, SECONDS, WARMUP } from './settings.ts';

export async function profileRun(which: 'proxy' | 'v1' | 'handshake' | 'h2', ctx: { startOne: (args: string[]) => Promise<Portico>; stopMain: () => Promise<void>; auth: Record<string, string>; resolution: Resolution; tmp: string; pinning: Pinning }) {
  console.log(`\n## CPU profile of Portico (${which}, ${SECONDS} s under load, node --cpu-prof)`);
  await ctx.stopMain();
  const dir = path.join(ctx.tmp, 'profile');
  mkdirSync(dir, { recursive: true });
  // same Redis and certs dir: the project and the key are there already
  const p = await ctx.startOne(['--cpu-prof', `--cpu-prof-dir=${dir}`]);
  const cpus = ctx.pinning.client;
  const load = (seconds: number) => which === 'handshake'
    ? runHandshakes({ port: p.https, servername: 'bench.localhost', hostHeader: 'bench.localhost', path: '/', concurrency: HANDSHAKE_CONCURRENCY, seconds, maxRequests: 250_000, resume: false, groups: HANDSHAKE_GROUPS, cpus })
    : which === 'h2'
      ? runH2load({ hostname: 'bench.localhost', port: p.https, path: '/', clients: H2_CLIENTS, streams: H2_STREAMS, seconds, cpus, logFile: h2loadLog(ctx.tmp, 'profile') })
      : runWrk({ scheme: 'https', hostname: which === 'v1' ? 'api.localhost' : 'bench.localhost', port: p.https, path: which === 'v1' ? '/v1/categories' : '/', headers: which === 'v1' ? ctx.auth : undefined, connections: CONNECTIONS, seconds, cpus, resolution: ctx.resolution });
  await load(WARMUP);
  const r = await load(SECONDS);
  console.log(`under the profiler: ${fmtInt(r.rps)} req/s, p99 ${fmt(r.p99ms)} ms${r.errors ? `, errors: ${r.errorDetail}` : ''}${r.info ? `, ${r.info}` : ''}`);
  await stop(p.process, 15_000);
  for (let i = 0; i < 50 && !readdirSync(dir).some((f) => f.endsWith('.cpuprofile')); i++) await sleep(100);
  const file = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile')).map((f) => path.join(dir, f)).sort((a, b) => statSync(b).size - statSync(a).size)[0];
  if (!file) {
    console.log('no .cpuprofile was written');
    return undefined;
  }
  const kept = path.resolve(import.meta.dirname, '..', 'results', `portico-${which}-${new Date().toISOString().replace(/[:.]/g, '-')}.cpuprofile`);
  mkdirSync(path.dirname(kept), { recursive: true });
  copyFileSync(file, kept);
  console.log(`profile kept in ${path.relative(process.cwd(), kept)} (open it in Chrome DevTools or speedscope)`);
  const summary = summarizeProfile(file, 20);
  console.log(`busy ${(summary.busyMs / 1000).toFixed(1)} s (start-up included); self time, share of busy:`);
  console.log(table(['function', '%'], summary.functions.map((f) => [f.name, fmt(f.pct, 1)])));
  console.log('');
  console.log(table(['module', '%'], summary.modules.map((m) => [m.name, fmt(m.pct, 1)])));
  return summary;
}
