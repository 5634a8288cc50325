// `npm run bench` — Portico against anchors measured in the same run on the same machine (DESIGN §9,
// issues 3, 4, 7). Every figure is a ratio to an anchor: absolute numbers on a shared, noisy machine
// mean little on their own.
//
//   a. proxy keep-alive: wrk → HTTPS → Portico → loopback origin, vs nginx (same origin, keep-alive
//      upstream); informational: a bare undici proxy in Node (bench/bare-proxy.ts), the origin directly
//   b. /v1: authenticated GET /v1/categories with the Redis limiter, vs a bare Node HTTPS server
//      answering a body of the same size; informational: a Portico on embedded state (no Redis)
//   b2. /v1 as b on each Redis topology: one Redis, Sentinel, a three-primary Cluster, each vs the bare
//      Node HTTPS server (bench/scenarios/v1-topologies.ts)
//   c. redirect: the plain-HTTP listener's redirect to HTTPS, vs nginx `return 308`
//   d. full TLS handshake per request (a Node client that never offers a session), vs nginx; informational:
//      a bare Node HTTPS server (answers itself) and the bare undici proxy (the least a Node proxy does)
//   e. resumed handshake per request (wrk with `Connection: close` resumes its session), vs nginx
//   p. latency at equal load: a and b again, but each wrk connection pauses BENCH_PACE_MS (20) between
//      an answer and its next request, so every server gets the same offered load below saturation;
//      p50/p99 there are service times, not queueing behind a full core (which is what the p99 of a
//      and b mostly is: 50 connections ÷ req/s)
//   h2. scenario a over HTTP/2: h2load → Portico and → nginx (`listen … ssl http2`), and in the same
//      run Portico and nginx over HTTP/1.1 (wrk), so HTTP/2 ÷ HTTP/1.1 is visible
//   k. cluster: `portico serve --workers N` on Redis state, proxy keep-alive, N = 1, 2, … (on 2 cores
//      both on core 0: the per-core cost of N workers, not the slope)
//   f. scale: 100,000 domains with stored certificates (embedded state, generated on disk and cached
//      in bench/results/scale-cache/): start-up time, RSS, and the first handshake for a cold domain
//      read from storage against a cached one; 1,000 domains in the same run for comparison
//
// The server under test runs on core 0 (taskset), the load side (wrk, origin, Redis, clients, this
// script) on the other core(s). Each target is warmed up, then measured REPEATS times, interleaved.
//
// Environment: BENCH_QUICK=1 (5 s × 1 instead of 15 s × 3), BENCH_SECONDS, BENCH_REPEATS, BENCH_WARMUP (3 s),
// BENCH_CONNECTIONS (50), BENCH_VARIANT (a second Portico with extra variables, measured interleaved: an A/B run),
// BENCH_VARIANT_ENTRY (that second Portico from another build, e.g. an older checkout's dist/cli/main.js),
// BENCH_TLS_GROUPS (the handshake client's key exchange groups; default X25519, what nginx can do),
// BENCH_VARIANT_NODE_ARGS (Node flags for that second Portico after npm start's, e.g. --max-semi-space-size=32),
// BENCH_ONLY=proxy,h2,v1,topologies,paced,redirect,handshake,resume,cluster,scale, BENCH_PROFILE=proxy|v1|handshake (a --cpu-prof run of Portico
// afterwards, top self-time functions printed), BENCH_SRC=1 (run src/ instead of the build in dist/, which is
// what `npm start` runs and what the bench builds and runs by default),
// BENCH_H2_STREAMS (h2load -m, 10), BENCH_SCALE_DOMAINS (dataset sizes, "1000,100000"),
// BENCH_SCALE_HANDSHAKES (cold handshakes in bulk for the RSS curve: 1,000 quick, 20,000 full).
import { spawnSync, execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../test/helpers/free-port.ts';
import { NICE, choosePinning, coreTimes, cpuSeconds, onPath, portFromStdout, processTree, rssMiB, sleep, spawnPinned, stop, stopAll, waitForPort, type Pinning, type Spawned } from './lib/proc.ts';
import { chooseResolution, runWrk, type LoadResult, type Resolution } from './lib/wrk.ts';
import { runHandshakes } from './lib/tls-load.ts';
import { startNginx, type Nginx } from './lib/nginx.ts';
import { startOrigin } from './lib/origin.ts';
import { admin, buildDist, startPortico, provision, type Portico } from './lib/portico.ts';
import { expectStatus, get } from './lib/check.ts';
import { summarizeProfile } from './lib/profile.ts';
import { topologiesScenario } from './scenarios/v1-topologies.ts';
import { h2loadLog, runH2load } from './lib/h2load.ts';
import { ensureDataset, hostnameOf, loadRedis, memoryBreakdown, procStatus, runScaleClient, startOnDataset, type ClientResult, type Dataset, type ScaleContext, type StartSample } from './lib/scale.ts';

const QUICK = process.env.BENCH_QUICK === '1';
const SECONDS = Number(process.env.BENCH_SECONDS ?? (QUICK ? 5 : 15));
const REPEATS = Number(process.env.BENCH_REPEATS ?? (QUICK ? 1 : 3));
// 1 s left Portico's first measured scenario ~30 % below its later ones (JIT tiers, heap still
// growing): the first repeat of a quick run measured warm-up, not the server
const WARMUP = Number(process.env.BENCH_WARMUP ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const HANDSHAKE_CONCURRENCY = 32;
// scenario p: each connection's pause between an answer and its next request (≈ CONNECTIONS × 1000 ÷ PACE_MS req/s offered)
const PACE_MS = Number(process.env.BENCH_PACE_MS ?? 20);
// HTTP/2: h2load -c H2_CLIENTS -m H2_STREAMS (streams in flight per connection)
const H2_CLIENTS = CONNECTIONS;
const H2_STREAMS = Number(process.env.BENCH_H2_STREAMS ?? 10);
// 100k domains: the dataset sizes, starts per size, cold handshakes measured one by one, and the
// cold handshakes (to distinct domains) made in bulk to watch RSS against the SNI cache bound (1,000)
const SCALE_SIZES = (process.env.BENCH_SCALE_DOMAINS ?? '1000,100000').split(',').map(Number).filter((n) => n > 0).sort((a, b) => a - b);
const SCALE_STARTS = QUICK ? 1 : 3;
const SCALE_COLD = 200;
const SCALE_BULK = Number(process.env.BENCH_SCALE_HANDSHAKES ?? (QUICK ? 1000 : 20_000));
const SCALE_BULK_STEP = 1000;
const SCALE_CONCURRENCY = 8;
// a handshake to a cached domain every 20 ms for 70 s (crosses the 60 s certificate sweep): full runs only
const SCALE_PROBE_SECONDS = Number(process.env.BENCH_SCALE_PROBE ?? (QUICK ? 0 : 70));
const ALL = ['proxy', 'h2', 'v1', 'topologies', 'paced', 'redirect', 'handshake', 'resume', 'cluster', 'scale'] as const;
type ScenarioId = (typeof ALL)[number];
const ONLY = new Set((process.env.BENCH_ONLY ?? ALL.join(',')).split(',').map((s) => s.trim()).filter(Boolean));
const VARIANT_ENTRY = process.env.BENCH_VARIANT_ENTRY || undefined;
// The key exchange the handshake client offers. nginx 1.22 on OpenSSL 3.0 has no ML-KEM, so the
// anchored figure offers X25519 only and both servers do the same work; BENCH_TLS_GROUPS=X25519MLKEM768:X25519
// offers the hybrid post-quantum exchange first, as browsers do, which Portico then picks.
const HANDSHAKE_GROUPS = process.env.BENCH_TLS_GROUPS || 'X25519';
const VARIANT_NODE_ARGS = (process.env.BENCH_VARIANT_NODE_ARGS ?? '').trim().split(/\s+/).filter(Boolean);
const VARIANT = process.env.BENCH_VARIANT || VARIANT_ENTRY || VARIANT_NODE_ARGS.length ? Object.fromEntries((process.env.BENCH_VARIANT ?? '').trim().split(/\s+/).filter(Boolean).map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)])) as Record<string, string> : null;
const PROFILE = process.env.BENCH_PROFILE === '1' ? 'proxy' : process.env.BENCH_PROFILE ?? '';
const ROOT = path.resolve(import.meta.dirname, '..');

// ---------------------------------------------------------------------------------------------
// measurement

interface Target {
  name: string;
  /** the server under test for this row: whose CPU and RSS are read */
  pids: () => number[];
  /** on the server core (so core-0 time not spent by it is someone else's) */
  onServerCore: boolean;
  /** `mark` (optional): the load generator's own measurement window, when it has a warm-up inside */
  load: (seconds: number, mark?: (at: 'start' | 'end') => void) => Promise<LoadResult>;
  /** a line of extra facts after the measurement (e.g. resumed share from nginx's log) */
  after?: () => string | undefined;
  before?: () => void;
}

interface Sample extends LoadResult {
  cpuPct: number;
  perCpuSecond: number;
  rss: number;
  serverCoreOther: number | null;
  clientCoreBusy: number | null;
  note?: string;
}

interface Ratio {
  label: string;
  num: string;
  den: string;
  metric: 'rps' | 'p99ms' | 'perCpuSecond';
  target?: { op: '>=' | '<='; value: number };
}

interface Scenario {
  id: ScenarioId;
  title: string;
  describe: string;
  targets: Target[];
  ratios: Ratio[];
  /** servers of this scenario alone: started just before it and stopped after, so they idle on no other */
  setup?: () => Promise<void>;
  teardown?: () => Promise<void>;
}

interface ScenarioResult {
  id: ScenarioId;
  title: string;
  describe: string;
  rows: Array<{ name: string; samples: Sample[] }>;
  ratios: Array<Ratio & { value: number; min: number; max: number }>;
}

let pinning: Pinning;

async function measure(t: Target, seconds: number): Promise<Sample> {
  t.before?.();
  const pids = t.pids();
  let cpu0 = cpuSeconds(pids);
  let cores0 = coreTimes();
  let t0 = performance.now();
  let end: { cpu: number; cores: ReturnType<typeof coreTimes>; t: number } | undefined;
  const r = await t.load(seconds, (at) => {
    if (at === 'start') {
      cpu0 = cpuSeconds(pids);
      cores0 = coreTimes();
      t0 = performance.now();
    } else end = { cpu: cpuSeconds(pids), cores: coreTimes(), t: performance.now() };
  });
  end ??= { cpu: cpuSeconds(pids), cores: coreTimes(), t: performance.now() };
  const wall = (end.t - t0) / 1000;
  const cpu = end.cpu - cpu0;
  const cores1 = end.cores;
  const busy = (core: string | null) => {
    if (core === null) return null;
    let b = 0;
    let total = 0;
    for (const c of expand(core)) {
      const a = cores0.get(c);
      const z = cores1.get(c);
      if (!a || !z) return null;
      b += z.busy - a.busy;
      total += z.total - a.total;
    }
    return total > 0 ? (b / total) * 100 : null;
  };
  const cpuPct = (cpu / wall) * 100;
  const serverBusy = busy(pinning.server);
  return {
    ...r,
    cpuPct,
    perCpuSecond: cpu > 0 ? r.requests / cpu : 0,
    rss: rssMiB(pids),
    serverCoreOther: serverBusy === null || !t.onServerCore ? null : Math.max(0, serverBusy - cpuPct),
    clientCoreBusy: busy(pinning.client),
    note: [r.info, t.after?.()].filter(Boolean).join('; ') || undefined,
  };
}

/**
 * The steps of the cluster curve: N workers on cores 0…N-1 and the load on the rest, N up to half the
 * cores (the load side needs about as many cores as Portico: wrk and the origin). With 2 cores there
 * is no free core for a second worker: N = 1 and 2 both run on core 0.
 */
function clusterPlan(cores: number): Array<{ workers: number; server: string; client: string }> {
  if (!pinning.server || cores < 2) return [];
  if (cores < 4) return [1, 2].map((workers) => ({ workers, server: '0', client: cores === 2 ? '1' : `1-${cores - 1}` }));
  return Array.from({ length: Math.floor(cores / 2) }, (_, i) => ({ workers: i + 1, server: i === 0 ? '0' : `0-${i}`, client: `${i + 1}-${cores - 1}` }));
}

const clusterName = (workers: number) => `Portico, ${workers} worker${workers === 1 ? '' : 's'}`;

function expand(cores: string): number[] {
  return cores.split(',').flatMap((part) => {
    const [a, b] = part.split('-').map(Number);
    return b === undefined ? [a] : Array.from({ length: b - a + 1 }, (_, i) => a + i);
  });
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

async function runScenario(s: Scenario): Promise<ScenarioResult> {
  console.log(`\n## ${s.title}\n${s.describe}`);
  await s.setup?.();
  try {
    return await measureScenario(s);
  } finally {
    await s.teardown?.();
  }
}

async function measureScenario(s: Scenario): Promise<ScenarioResult> {
  for (const t of s.targets) await t.load(WARMUP).catch((err) => console.log(`  warm-up of ${t.name} failed: ${(err as Error).message.split('\n')[0]}`));
  const samples = new Map<string, Sample[]>(s.targets.map((t) => [t.name, []]));
  for (let r = 0; r < REPEATS; r++) {
    // alternate the order so a drift in machine load does not always favour the same target
    const order = r % 2 === 0 ? s.targets : [...s.targets].reverse();
    for (const t of order) {
      const sample = await measure(t, SECONDS);
      samples.get(t.name)!.push(sample);
      process.stdout.write(`  [${r + 1}/${REPEATS}] ${t.name}: ${fmtInt(sample.rps)} req/s, p99 ${fmt(sample.p99ms)} ms, CPU ${fmt(sample.cpuPct, 0)}%${sample.errors ? `, errors: ${sample.errorDetail}` : ''}${sample.note ? `, ${sample.note}` : ''}\n`);
    }
  }
  const pick = (name: string, metric: Ratio['metric']) => samples.get(name)!.map((x) => x[metric]);
  const ratios = s.ratios.map((ratio) => {
    const num = pick(ratio.num, ratio.metric);
    const den = pick(ratio.den, ratio.metric);
    const each = num.map((n, i) => n / den[i]);
    return { ...ratio, value: median(num) / median(den), min: Math.min(...each), max: Math.max(...each) };
  });
  const result: ScenarioResult = { id: s.id, title: s.title, describe: s.describe, rows: s.targets.map((t) => ({ name: t.name, samples: samples.get(t.name)! })), ratios };
  printScenario(result);
  return result;
}

// ---------------------------------------------------------------------------------------------
// output

const fmt = (n: number | null | undefined, digits = 2) => (n === null || n === undefined || !Number.isFinite(n) ? '–' : n.toFixed(digits));
const fmtInt = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–');

function table(header: string[], rows: string[][], alignLeft = 1): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => (i < alignLeft ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

function printScenario(r: ScenarioResult): void {
  const rows = r.rows.map(({ name, samples }) => {
    const rps = samples.map((s) => s.rps);
    const errors = samples.reduce((a, s) => a + s.errors, 0);
    const others = samples.map((s) => s.serverCoreOther).filter((x): x is number => x !== null);
    const clients = samples.map((s) => s.clientCoreBusy).filter((x): x is number => x !== null);
    return [
      name,
      fmtInt(median(rps)),
      samples.length > 1 ? `${fmtInt(Math.min(...rps))}–${fmtInt(Math.max(...rps))}` : '–',
      fmt(median(samples.map((s) => s.p50ms))),
      fmt(median(samples.map((s) => s.p99ms))),
      fmt(median(samples.map((s) => s.cpuPct)), 0),
      fmtInt(median(samples.map((s) => s.perCpuSecond))),
      fmt(Math.max(...samples.map((s) => s.rss)), 0),
      others.length ? fmt(median(others), 0) : '–',
      clients.length ? fmt(median(clients), 0) : '–',
      errors ? `${errors} (${samples.find((s) => s.errors)?.errorDetail})` : '0',
    ];
  });
  console.log('');
  console.log(table(['target', 'req/s', 'min–max', 'p50 ms', 'p99 ms', 'CPU %', 'req/CPU-s', 'RSS MiB', 'core0 other %', 'load cores %', 'errors'], rows));
  const notes = r.rows.flatMap(({ name, samples }) => samples.map((s) => s.note).filter(Boolean).slice(0, 1).map((n) => `${name}: ${n}`));
  if (notes.length) console.log(notes.map((n) => `  ${n}`).join('\n'));
  for (const ratio of r.ratios) console.log(`  ${ratioLine(ratio)}`);
}

function verdict(ratio: { value: number; target?: Ratio['target'] }): string {
  if (!ratio.target) return 'info';
  const ok = ratio.target.op === '>=' ? ratio.value >= ratio.target.value : ratio.value <= ratio.target.value;
  return ok ? 'PASS' : 'FAIL';
}

function ratioLine(ratio: ScenarioResult['ratios'][number]): string {
  const range = REPEATS > 1 ? ` (per repeat ${fmt(ratio.min)}–${fmt(ratio.max)})` : '';
  const target = ratio.target ? `, target ${ratio.target.op === '>=' ? '≥' : '≤'} ${ratio.target.value}: ${verdict(ratio)}` : '';
  return `${ratio.label}: ${fmt(ratio.value)}${range}${target}`;
}

// ---------------------------------------------------------------------------------------------
// tools

function ensureTools(): { wrk: boolean; nginx: boolean; redis: boolean; h2load: boolean; notes: string[] } {
  const needed: Array<[string, string]> = [['wrk', 'wrk'], ['nginx', 'nginx'], ['redis-server', 'redis-server'], ['h2load', 'nghttp2-client']];
  const notes: string[] = [];
  const missing = needed.filter(([bin]) => !onPath(bin)).map(([, pkg]) => pkg);
  if (missing.length) {
    if (process.getuid?.() === 0 && existsSync('/usr/bin/apt-get')) {
      console.log(`installing ${missing.join(' ')} with apt-get`);
      const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
      try {
        execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
        execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...missing], { stdio: 'inherit', env });
      } catch (err) {
        notes.push(`apt-get install ${missing.join(' ')} failed: ${(err as Error).message.split('\n')[0]}`);
      }
    } else {
      notes.push(`not installed and not root on Debian: ${missing.join(' ')} (sudo apt-get install -y ${missing.join(' ')})`);
    }
  }
  return { wrk: onPath('wrk'), nginx: onPath('nginx'), redis: onPath('redis-server'), h2load: onPath('h2load'), notes };
}

function version(cmd: string, args: string[]): string {
  const out = spawnSync(cmd, args, { encoding: 'utf8' });
  return `${out.stdout ?? ''}${out.stderr ?? ''}`.split('\n').find(Boolean)?.trim() ?? '?';
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const cores = os.availableParallelism();
  pinning = choosePinning(cores);
  if (pinning.client) spawnSync('taskset', ['-a', '-p', '-c', pinning.client, String(process.pid)], { stdio: 'ignore' });
  if (NICE) spawnSync('renice', ['-n', String(NICE), '-p', String(process.pid)], { stdio: 'ignore' });
  const tools = ensureTools();
  buildDist();
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'portico-bench-'));
  const skipped: string[] = [];
  const results: ScenarioResult[] = [];
  const started = new Date();
  let portico: Portico | undefined;
  let variant: Portico | undefined;
  let embedded: Portico | undefined;
  let nginx: Nginx | undefined;
  let origin: Spawned | undefined;
  let redis: Spawned | undefined;
  let bare: Spawned | undefined;
  let bareProxy: Spawned | undefined;

  console.log(`# Portico bench — ${QUICK ? 'quick' : 'full'} run, ${SECONDS} s × ${REPEATS} per target (warm-up ${WARMUP} s), ${CONNECTIONS} connections`);
  console.log(`machine: ${os.cpus()[0]?.model ?? '?'} × ${cores}, load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}, Node ${process.version}`);
  console.log(`tools: ${tools.wrk ? version('wrk', ['-v']).replace(/ Copyright.*/, '') : 'wrk missing'}; ${tools.nginx ? version('nginx', ['-v']) : 'nginx missing'}; ${tools.redis ? version('redis-server', ['--version']).split(' ').slice(0, 3).join(' ') : 'redis-server missing'}; ${tools.h2load ? version('h2load', ['--version']) : 'h2load missing'}`);
  console.log(`pinning: ${pinning.note}; priority: ${NICE ? `nice ${NICE} for the bench's processes (BENCH_NICE=0: off)` : 'normal'}`);
  for (const note of tools.notes) console.log(`note: ${note}`);
  const idle0 = coreTimes();
  await sleep(1000);
  const idle1 = coreTimes();
  const busyNow = [...idle1].map(([core, t]) => {
    const a = idle0.get(core)!;
    return `core ${core} ${Math.round(((t.busy - a.busy) / Math.max(1e-9, t.total - a.total)) * 100)}%`;
  });
  console.log(`already busy before the bench (1 s sample, other work on the machine): ${busyNow.join(', ')}`);
  const resolution: Resolution = chooseResolution(tmp);
  console.log(`SNI: ${resolution.note}`);

  const cleanup = async () => {
    await stopAll();
    rmSync(tmp, { recursive: true, force: true });
  };
  process.once('SIGINT', () => { void cleanup().then(() => process.exit(130)); });

  try {
    // --- the load side: origin and Redis
    // nginx answering itself when installed: the Node origin saturated the load core (see lib/origin.ts)
    const originServer = await startOrigin(path.join(tmp, 'origin'), pinning.client, tools.nginx);
    origin = originServer.process;
    const originPort = originServer.port;
    console.log(`origin: ${originServer.kind === 'nginx' ? 'nginx answering 100 bytes itself (return 200)' : 'bench/origin.ts (node:http; nginx is not installed)'}, on the load core`);
    let redisUrl: string | undefined;
    if (tools.redis) {
      const port = await freePort();
      mkdirSync(path.join(tmp, 'redis'));
      redis = spawnPinned('redis', pinning.client, 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', path.join(tmp, 'redis')]);
      await waitForPort(port);
      redisUrl = `redis://127.0.0.1:${port}`;
    }

    // --- Portico
    const certsDir = path.join(tmp, 'certs');
    let starts = 0;
    const startOne = (nodeArgs: string[] = []) => startPortico({ dataDir: path.join(tmp, 'data'), certsDir, logFile: path.join(tmp, `portico-${++starts}.log`), cpus: pinning.server, redisUrl, nodeArgs });
    portico = await startOne();
    console.log(`Portico: ${path.relative(ROOT, portico.entry)}, pid ${portico.process.pid}, ${processTree(portico.process.pid).length} process(es), state ${redisUrl ? 'in Redis (PORTICO_REDIS_URL)' : 'embedded (no redis-server)'}, access log on → file`);
    const { key } = await provision(portico, originPort);
    // BENCH_VARIANT='NAME=value …': a second Portico with these variables beside the first (Redis
    // state only: both serve the same accounts, keys and project), measured interleaved with it
    if (VARIANT && redisUrl) {
      variant = await startPortico({ dataDir: path.join(tmp, 'data-variant'), certsDir, logFile: path.join(tmp, 'portico-variant.log'), cpus: pinning.server, redisUrl, env: VARIANT, entry: VARIANT_ENTRY, nodeArgs: VARIANT_NODE_ARGS });
      console.log(`Portico (variant): ${[VARIANT_ENTRY ?? '', ...VARIANT_NODE_ARGS, ...Object.entries(VARIANT).map(([k, v]) => `${k}=${v}`)].join(' ').trim()}, pid ${variant.process.pid}`);
    } else if (VARIANT) console.log('note: BENCH_VARIANT needs redis-server (the variant shares the first Portico\'s state through Redis); ignored');
    const auth = { authorization: `Bearer ${key}` };
    for (const [name, description] of [['Dogs', 'Loyal companions'], ['Cats', 'Independent spirits'], ['Birds', 'Feathered friends']]) {
      await expectStatus('POST /v1/categories', get({ scheme: 'https', port: portico.https, hostname: 'api.localhost', path: '/v1/categories', method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ name, description }) }), 201);
    }
    const proxied = await expectStatus('Portico → origin', get({ scheme: 'https', port: portico.https, hostname: 'bench.localhost', path: '/' }), 200);
    if (proxied.body.length !== 100) throw new Error(`Portico → origin: expected the origin's 100-byte body, got ${proxied.body.length} bytes`);
    const v1Body = (await expectStatus('GET /v1/categories', get({ scheme: 'https', port: portico.https, hostname: 'api.localhost', path: '/v1/categories', headers: auth }), 200)).body;
    writeFileSync(path.join(tmp, 'v1-body.json'), v1Body);
    // /v1 on embedded state (what `npm start` runs without PORTICO_REDIS_URL): an informational row of
    // scenario b, a Portico of its own with the same account, categories and answer
    let embeddedAuth: Record<string, string> = {};
    if (redisUrl && ONLY.has('v1') && tools.wrk) {
      embedded = await startPortico({ dataDir: path.join(tmp, 'data-embedded'), certsDir, logFile: path.join(tmp, 'portico-embedded.log'), cpus: pinning.server });
      embeddedAuth = { authorization: `Bearer ${(await provision(embedded, originPort)).key}` };
      for (const category of JSON.parse(v1Body.toString('utf8')) as Array<{ name: string; description: string }>) {
        await expectStatus('POST /v1/categories (embedded)', get({ scheme: 'https', port: embedded.https, hostname: 'api.localhost', path: '/v1/categories', method: 'POST', headers: { ...embeddedAuth, 'content-type': 'application/json' }, body: JSON.stringify({ name: category.name, description: category.description }) }), 201);
      }
      const answer = await expectStatus('GET /v1/categories (embedded)', get({ scheme: 'https', port: embedded.https, hostname: 'api.localhost', path: '/v1/categories', headers: embeddedAuth }), 200);
      if (answer.body.length !== v1Body.length) throw new Error(`Portico on embedded state answers ${answer.body.length} bytes for /v1/categories, the Redis one ${v1Body.length}`);
    }

    // --- anchors
    if (tools.nginx) {
      try {
        nginx = await startNginx(path.join(tmp, 'nginx'), { certFile: portico.certFile, keyFile: portico.keyFile, originPort, cpus: pinning.server });
        await expectStatus('nginx → origin', get({ scheme: 'https', port: nginx.https, hostname: 'bench.localhost', path: '/' }), 200);
      } catch (err) {
        console.log(`note: nginx did not start, its scenarios are skipped: ${(err as Error).message.split('\n')[0]}`);
        await stop(nginx?.process);
        nginx = undefined;
      }
    } else {
      console.log('note: nginx is not installed: the nginx anchors (proxy, redirect, handshakes) are skipped');
    }
    bare = spawnPinned('bare-https', pinning.server, process.execPath, [path.join(import.meta.dirname, 'bare-https.ts')], {
      env: { ...process.env, CERT_FILE: portico.certFile, KEY_FILE: portico.keyFile, BODY_FILE: path.join(tmp, 'v1-body.json') },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const barePort = await portFromStdout(bare);
    const bareAnswer = await expectStatus('bare HTTPS', get({ scheme: 'https', port: barePort, hostname: 'api.localhost', path: '/v1/categories' }), 200);
    if (!bareAnswer.body.equals(v1Body)) throw new Error('bare HTTPS server does not answer the /v1 body');

    bareProxy = spawnPinned('bare-proxy', pinning.server, process.execPath, [path.join(import.meta.dirname, 'bare-proxy.ts')], {
      env: { ...process.env, CERT_FILE: portico.certFile, KEY_FILE: portico.keyFile, ORIGIN: `http://127.0.0.1:${originPort}` },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const bareProxyPort = await portFromStdout(bareProxy);
    const bareProxied = await expectStatus('bare undici proxy', get({ scheme: 'https', port: bareProxyPort, hostname: 'bench.localhost', path: '/' }), 200);
    if (bareProxied.body.length !== 100) throw new Error('bare undici proxy does not pass the origin body through');

    const pidsOf = (p: Spawned) => () => processTree(p.pid);
    const truncate = (file: string) => () => {
      if (existsSync(file)) truncateSync(file, 0);
    };
    const porticoPids = () => processTree(portico!.process.pid);
    const wrk = (port: number, hostname: string, urlPath: string, extra: { scheme?: 'http' | 'https'; headers?: Record<string, string>; paceMs?: number } = {}) => (seconds: number) =>
      runWrk({ scheme: extra.scheme ?? 'https', hostname, port, path: urlPath, headers: extra.headers, connections: CONNECTIONS, seconds, cpus: pinning.client, resolution, paceMs: extra.paceMs });
    const handshakes = (port: number, hostname: string, urlPath: string, resume: boolean) => (seconds: number) =>
      runHandshakes({ port, servername: hostname, hostHeader: hostname, path: urlPath, concurrency: HANDSHAKE_CONCURRENCY, seconds, maxRequests: 250_000, resume, groups: HANDSHAKE_GROUPS, cpus: pinning.client });
    const nginxReuse = () => {
      if (!nginx || !existsSync(nginx.accessLog)) return undefined;
      const lines = readFileSync(nginx.accessLog, 'utf8').split('\n').filter(Boolean);
      const reused = lines.filter((l) => l.endsWith('reused=r')).length;
      return lines.length ? `resumed ${Math.round((reused / lines.length) * 100)}% (nginx log)` : undefined;
    };
    const clearLogs = () => {
      truncate(portico!.logFile)();
      if (nginx) truncate(nginx.accessLog)();
    };

    const scenarios: Scenario[] = [];
    if (!tools.wrk) skipped.push('proxy, /v1, redirect, resumed: wrk is not installed');
    if (tools.wrk && ONLY.has('proxy')) {
      const targets: Target[] = [
        { name: 'Portico → origin', pids: porticoPids, onServerCore: true, before: clearLogs, load: wrk(portico.https, 'bench.localhost', '/') },
      ];
      if (variant) targets.push({ name: 'Portico → origin (variant)', pids: pidsOf(variant.process), onServerCore: true, load: wrk(variant.https, 'bench.localhost', '/') });
      if (nginx) targets.push({ name: 'nginx → origin', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs, load: wrk(nginx.https, 'bench.localhost', '/') });
      targets.push({ name: 'bare undici proxy (info)', pids: pidsOf(bareProxy), onServerCore: true, load: wrk(bareProxyPort, 'bench.localhost', '/') });
      targets.push({ name: 'origin direct (http, info)', pids: pidsOf(origin), onServerCore: false, load: wrk(originPort, '127.0.0.1', '/', { scheme: 'http' }) });
      scenarios.push({
        id: 'proxy',
        title: 'a. proxy keep-alive (custom-domain route: bench.localhost → loopback origin)',
        describe: `wrk -t1 -c${CONNECTIONS}, HTTPS keep-alive, GET / answered by the origin with 100 bytes; Portico and nginx on one core; the origin on the load core`,
        targets,
        ratios: nginx
          ? [
              { label: 'Portico ÷ nginx req/s', num: 'Portico → origin', den: 'nginx → origin', metric: 'rps', target: { op: '>=', value: 0.3 } },
              { label: 'Portico ÷ nginx p99', num: 'Portico → origin', den: 'nginx → origin', metric: 'p99ms', target: { op: '<=', value: 2 } },
              { label: 'Portico ÷ nginx req per CPU-second', num: 'Portico → origin', den: 'nginx → origin', metric: 'perCpuSecond' },
              { label: 'bare undici proxy ÷ nginx req/s', num: 'bare undici proxy (info)', den: 'nginx → origin', metric: 'rps' },
              { label: 'Portico ÷ bare undici proxy req per CPU-second', num: 'Portico → origin', den: 'bare undici proxy (info)', metric: 'perCpuSecond' },
            ]
          : [{ label: 'Portico ÷ bare undici proxy req per CPU-second', num: 'Portico → origin', den: 'bare undici proxy (info)', metric: 'perCpuSecond' }],
      });
      if (!nginx) skipped.push('a. proxy vs nginx: nginx unavailable (Portico and origin measured only)');
    }
    if (ONLY.has('h2') && !tools.h2load) skipped.push('h2. HTTP/2: h2load is not installed (Debian nghttp2-client)');
    if (ONLY.has('h2') && tools.h2load) {
      const h2 = (port: number, name: string) => (seconds: number, mark?: (at: 'start' | 'end') => void) =>
        runH2load({ hostname: 'bench.localhost', port, path: '/', clients: H2_CLIENTS, streams: H2_STREAMS, seconds, cpus: pinning.client, logFile: h2loadLog(tmp, name) }, mark);
      const targets: Target[] = [{ name: 'Portico h2 → origin', pids: porticoPids, onServerCore: true, before: clearLogs, load: h2(portico.https, 'portico') }];
      if (nginx) targets.push({ name: 'nginx h2 → origin', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs, load: h2(nginx.https, 'nginx') });
      else skipped.push('h2. HTTP/2 vs nginx: nginx unavailable');
      if (tools.wrk) {
        targets.push({ name: 'Portico HTTP/1.1 → origin', pids: porticoPids, onServerCore: true, before: clearLogs, load: wrk(portico.https, 'bench.localhost', '/') });
        if (nginx) targets.push({ name: 'nginx HTTP/1.1 → origin (info)', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs, load: wrk(nginx.https, 'bench.localhost', '/') });
      } else skipped.push('h2. HTTP/1.1 in the same run: wrk is not installed');
      const ratios: Ratio[] = [];
      if (nginx) {
        ratios.push(
          { label: 'Portico ÷ nginx h2 req/s', num: 'Portico h2 → origin', den: 'nginx h2 → origin', metric: 'rps' },
          { label: 'Portico ÷ nginx h2 req per CPU-second', num: 'Portico h2 → origin', den: 'nginx h2 → origin', metric: 'perCpuSecond' },
          { label: 'Portico ÷ nginx h2 p99', num: 'Portico h2 → origin', den: 'nginx h2 → origin', metric: 'p99ms', target: { op: '<=', value: 2 } },
        );
      }
      if (tools.wrk) {
        ratios.push(
          { label: 'Portico h2 ÷ Portico HTTP/1.1 req/s', num: 'Portico h2 → origin', den: 'Portico HTTP/1.1 → origin', metric: 'rps' },
          { label: 'Portico h2 ÷ Portico HTTP/1.1 req per CPU-second', num: 'Portico h2 → origin', den: 'Portico HTTP/1.1 → origin', metric: 'perCpuSecond' },
        );
        if (nginx) {
          ratios.push(
            { label: 'nginx h2 ÷ nginx HTTP/1.1 req per CPU-second', num: 'nginx h2 → origin', den: 'nginx HTTP/1.1 → origin (info)', metric: 'perCpuSecond' },
            { label: 'Portico ÷ nginx HTTP/1.1 req per CPU-second (scenario a, this run)', num: 'Portico HTTP/1.1 → origin', den: 'nginx HTTP/1.1 → origin (info)', metric: 'perCpuSecond' },
          );
        }
      }
      scenarios.push({
        id: 'h2',
        title: 'h2. HTTP/2 proxy (bench.localhost → loopback origin, as in a), with HTTP/1.1 in the same run',
        describe: `h2load -t1 -c${H2_CLIENTS} -m${H2_STREAMS} (${H2_CLIENTS * H2_STREAMS} streams in flight; its own 1 s warm-up, then -D, CPU read over the main duration), TLS + ALPN h2, SNI bench.localhost (--connect-to 127.0.0.1); the HTTP/1.1 rows are wrk -t1 -c${CONNECTIONS} as in a. Upstreams stay HTTP/1.1 keep-alive. p50/p99 from h2load's per-request log; latencies of h2 (${H2_CLIENTS * H2_STREAMS} in flight) and HTTP/1.1 (${CONNECTIONS} in flight) are not comparable, req per CPU-second is`,
        targets,
        ratios,
      });
    }
    if (tools.wrk && ONLY.has('v1')) {
      if (!redisUrl) skipped.push('b. /v1 with the Redis limiter: redis-server is not installed');
      else {
        scenarios.push({
          id: 'v1',
          title: 'b. /v1 authenticated GET /v1/categories (Redis state and limiter)',
          describe: `wrk -t1 -c${CONNECTIONS}, HTTPS keep-alive, Authorization: Bearer <key>, ${v1Body.length}-byte JSON body; the bare Node HTTPS server answers the same body itself`,
          targets: [
            { name: 'Portico /v1', pids: porticoPids, onServerCore: true, before: clearLogs, load: wrk(portico.https, 'api.localhost', '/v1/categories', { headers: auth }) },
            { name: 'bare Node HTTPS', pids: pidsOf(bare), onServerCore: true, load: wrk(barePort, 'api.localhost', '/v1/categories') },
            ...(variant ? [{ name: 'Portico /v1 (variant)', pids: pidsOf(variant.process), onServerCore: true, load: wrk(variant.https, 'api.localhost', '/v1/categories', { headers: auth }) }] : []),
            ...(embedded ? [{ name: 'Portico /v1, embedded state (info)', pids: pidsOf(embedded.process), onServerCore: true, before: truncate(embedded.logFile), load: wrk(embedded.https, 'api.localhost', '/v1/categories', { headers: embeddedAuth }) }] : []),
          ],
          ratios: [
            { label: 'Portico ÷ bare req/s', num: 'Portico /v1', den: 'bare Node HTTPS', metric: 'rps', target: { op: '>=', value: 0.75 } },
            { label: 'Portico ÷ bare p99', num: 'Portico /v1', den: 'bare Node HTTPS', metric: 'p99ms', target: { op: '<=', value: 2 } },
            { label: 'Portico ÷ bare req per CPU-second', num: 'Portico /v1', den: 'bare Node HTTPS', metric: 'perCpuSecond' },
            ...(embedded
              ? [
                  { label: 'Portico embedded ÷ bare req/s', num: 'Portico /v1, embedded state (info)', den: 'bare Node HTTPS', metric: 'rps' as const },
                  { label: 'Portico embedded ÷ Portico Redis req per CPU-second', num: 'Portico /v1, embedded state (info)', den: 'Portico /v1', metric: 'perCpuSecond' as const },
                ]
              : []),
          ],
        });
      }
    }
    // b2. /v1 on one Redis, through Sentinel and on a Cluster (bench/scenarios/v1-topologies.ts)
    if (tools.wrk && redisUrl && ONLY.has('topologies')) {
      scenarios.push(topologiesScenario({
        tmp, certsDir, originPort, serverCpus: pinning.server, clientCpus: pinning.client, v1Body, connections: CONNECTIONS,
        oneRedis: { name: 'Portico /v1', pids: porticoPids, onServerCore: true, before: clearLogs, load: wrk(portico.https, 'api.localhost', '/v1/categories', { headers: auth }) },
        bare: { name: 'bare Node HTTPS', pids: pidsOf(bare), onServerCore: true, load: wrk(barePort, 'api.localhost', '/v1/categories') },
        v1: (port, headers) => wrk(port, 'api.localhost', '/v1/categories', { headers }),
      }));
    }
    if (tools.wrk && ONLY.has('paced')) {
      const paced = { paceMs: PACE_MS };
      const targets: Target[] = [{ name: 'Portico → origin, paced', pids: porticoPids, onServerCore: true, before: clearLogs, load: wrk(portico.https, 'bench.localhost', '/', paced) }];
      const ratios: Ratio[] = [];
      if (nginx) {
        targets.push({ name: 'nginx → origin, paced', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs, load: wrk(nginx.https, 'bench.localhost', '/', paced) });
        ratios.push(
          { label: 'Portico ÷ nginx p99 at equal load', num: 'Portico → origin, paced', den: 'nginx → origin, paced', metric: 'p99ms', target: { op: '<=', value: 2 } },
          { label: 'Portico ÷ nginx req/s (the same offered load: ≈ 1)', num: 'Portico → origin, paced', den: 'nginx → origin, paced', metric: 'rps' },
        );
      } else skipped.push('p. paced proxy vs nginx: nginx unavailable');
      if (variant) {
        targets.push({ name: 'Portico → origin, paced (variant)', pids: pidsOf(variant.process), onServerCore: true, load: wrk(variant.https, 'bench.localhost', '/', paced) });
        ratios.push({ label: 'variant ÷ Portico p99 at equal load (proxy)', num: 'Portico → origin, paced (variant)', den: 'Portico → origin, paced', metric: 'p99ms' });
      }
      if (redisUrl) {
        targets.push(
          { name: 'Portico /v1, paced', pids: porticoPids, onServerCore: true, before: clearLogs, load: wrk(portico.https, 'api.localhost', '/v1/categories', { headers: auth, ...paced }) },
          { name: 'bare Node HTTPS, paced', pids: pidsOf(bare), onServerCore: true, load: wrk(barePort, 'api.localhost', '/v1/categories', paced) },
        );
        ratios.push({ label: 'Portico /v1 ÷ bare p99 at equal load', num: 'Portico /v1, paced', den: 'bare Node HTTPS, paced', metric: 'p99ms', target: { op: '<=', value: 2 } });
        if (variant) {
          targets.push({ name: 'Portico /v1, paced (variant)', pids: pidsOf(variant.process), onServerCore: true, load: wrk(variant.https, 'api.localhost', '/v1/categories', { headers: auth, ...paced }) });
          ratios.push({ label: 'variant ÷ Portico p99 at equal load (/v1)', num: 'Portico /v1, paced (variant)', den: 'Portico /v1, paced', metric: 'p99ms' });
        }
      }
      scenarios.push({
        id: 'paced',
        title: 'p. latency at equal load (a and b paced below saturation)',
        describe: `wrk -t1 -c${CONNECTIONS}, each connection pausing ${PACE_MS} ms between an answer and its next request (≈ ${fmtInt((CONNECTIONS * 1000) / PACE_MS)} req/s offered to every server); p50/p99 are then service times, not the queue behind a saturated core`,
        targets,
        ratios,
      });
    }
    if (tools.wrk && ONLY.has('redirect')) {
      await expectStatus('Portico redirect', get({ scheme: 'http', port: portico.http, hostname: 'bench.localhost', path: '/docs/start?x=1' }), 308);
      const targets: Target[] = [{ name: 'Portico HTTP → 308', pids: porticoPids, onServerCore: true, before: clearLogs, load: wrk(portico.http, 'bench.localhost', '/docs/start?x=1', { scheme: 'http', headers: { host: 'bench.localhost' } }) }];
      if (nginx) targets.push({ name: 'nginx return 308', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs, load: wrk(nginx.http, 'bench.localhost', '/docs/start?x=1', { scheme: 'http', headers: { host: 'bench.localhost' } }) });
      else skipped.push('c. redirect vs nginx: nginx unavailable');
      scenarios.push({
        id: 'redirect',
        title: 'c. redirect (plain HTTP listener → https://<host><path>)',
        describe: `wrk -t1 -c${CONNECTIONS}, HTTP keep-alive, every request answered 308 with Location`,
        targets,
        ratios: nginx ? [{ label: 'Portico ÷ nginx req/s', num: 'Portico HTTP → 308', den: 'nginx return 308', metric: 'rps' }, { label: 'Portico ÷ nginx p99', num: 'Portico HTTP → 308', den: 'nginx return 308', metric: 'p99ms' }] : [],
      });
    }
    if (ONLY.has('handshake')) {
      const targets: Target[] = [{ name: 'Portico (proxy)', pids: porticoPids, onServerCore: true, before: clearLogs, load: handshakes(portico.https, 'bench.localhost', '/', false) }];
      if (nginx) targets.push({ name: 'nginx (proxy)', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs, load: handshakes(nginx.https, 'bench.localhost', '/', false) });
      else skipped.push('d. full handshakes vs nginx: nginx unavailable');
      targets.push({ name: 'bare Node HTTPS (info)', pids: pidsOf(bare), onServerCore: true, load: handshakes(barePort, 'bench.localhost', '/', false) });
      // the least a Node proxy does per connection, on Portico's listener kind: the ceiling of the target
      targets.push({ name: 'bare undici proxy (info)', pids: pidsOf(bareProxy), onServerCore: true, load: handshakes(bareProxyPort, 'bench.localhost', '/', false) });
      if (variant) targets.push({ name: 'Portico (proxy, variant)', pids: pidsOf(variant.process), onServerCore: true, load: handshakes(variant.https, 'bench.localhost', '/', false) });
      scenarios.push({
        id: 'handshake',
        title: 'd. full TLS handshake per request (no session offered)',
        describe: `bench/tls-client.ts, ${HANDSHAKE_CONCURRENCY} concurrent loops of connect (TLS 1.3, ${HANDSHAKE_GROUPS}, ECDSA P-256) → GET / (Connection: close) → close, on the load core. The client may be the bottleneck, so "req/CPU-s" (handshakes per second of server CPU) is the per-core figure`,
        targets,
        ratios: [
          ...(nginx
            ? ([
                { label: 'Portico ÷ nginx handshakes per CPU-second', num: 'Portico (proxy)', den: 'nginx (proxy)', metric: 'perCpuSecond', target: { op: '>=', value: 0.9 } },
                { label: 'Portico ÷ nginx req/s (client-bound when both CPU% < 100)', num: 'Portico (proxy)', den: 'nginx (proxy)', metric: 'rps' },
                { label: 'Portico ÷ nginx p99', num: 'Portico (proxy)', den: 'nginx (proxy)', metric: 'p99ms' },
                { label: 'bare Node HTTPS (answers itself) ÷ nginx handshakes per CPU-second', num: 'bare Node HTTPS (info)', den: 'nginx (proxy)', metric: 'perCpuSecond' },
                { label: 'bare undici proxy ÷ nginx handshakes per CPU-second', num: 'bare undici proxy (info)', den: 'nginx (proxy)', metric: 'perCpuSecond' },
              ] satisfies Ratio[])
            : []),
          { label: 'Portico ÷ bare undici proxy handshakes per CPU-second', num: 'Portico (proxy)', den: 'bare undici proxy (info)', metric: 'perCpuSecond' },
        ],
      });
    }
    if (tools.wrk && ONLY.has('resume')) {
      const headers = { connection: 'close' };
      const targets: Target[] = [{ name: 'Portico (proxy)', pids: porticoPids, onServerCore: true, before: clearLogs, load: wrk(portico.https, 'bench.localhost', '/', { headers }) }];
      if (nginx) targets.push({ name: 'nginx (proxy)', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs, after: nginxReuse, load: wrk(nginx.https, 'bench.localhost', '/', { headers }) });
      else skipped.push('e. resumed handshakes vs nginx: nginx unavailable');
      scenarios.push({
        id: 'resume',
        title: 'e. resumed TLS handshake per request',
        describe: `wrk -t1 -c${CONNECTIONS} with Connection: close: a new connection per request, resuming wrk's previous session (TLS 1.3 ticket)`,
        targets,
        ratios: nginx
          ? [
              { label: 'Portico ÷ nginx req/s', num: 'Portico (proxy)', den: 'nginx (proxy)', metric: 'rps' },
              { label: 'Portico ÷ nginx req per CPU-second', num: 'Portico (proxy)', den: 'nginx (proxy)', metric: 'perCpuSecond' },
              { label: 'Portico ÷ nginx p99', num: 'Portico (proxy)', den: 'nginx (proxy)', metric: 'p99ms' },
            ]
          : [],
      });
      const resumes = await ticketResumes(portico.https);
      console.log(`\nnote: a second Node connection to Portico offering the first one's ticket ${resumes ? 'was resumed' : 'was NOT resumed (scenario e measures full handshakes for Portico)'}`);
    }
    if (ONLY.has('cluster')) {
      const plan = clusterPlan(cores);
      if (!tools.wrk || !redisUrl || plan.length === 0) {
        skipped.push(`k. cluster: needs ${[!tools.wrk && 'wrk', !redisUrl && 'redis-server (workers share state through Redis)', plan.length === 0 && 'taskset and 2 cores'].filter(Boolean).join(', ')}`);
      } else {
        // its own origin, with a worker per load core, so the origin is not what the curve measures;
        // it and the Porticos run only while this scenario does
        const loadCores = plan[plan.length - 1].client;
        const spawned: Spawned[] = [];
        const servers = new Map<number, Portico>();
        const setup = async () => {
          const clusterOrigin = spawnPinned('origin-cluster', loadCores, process.execPath, [path.join(import.meta.dirname, 'origin.ts')], { env: { ...process.env, WORKERS: String(expand(loadCores).length) }, stdio: ['ignore', 'pipe', 'inherit'] });
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
        scenarios.push({
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
        });
      }
    }
    for (const id of ALL) if (!ONLY.has(id)) skipped.push(`${id}: not in BENCH_ONLY`);

    for (const s of scenarios) results.push(await runScenario(s));
    let scale: ScaleResult | undefined;
    if (ONLY.has('scale')) scale = await runScale({ tmp, cpus: pinning.server, clientCpus: pinning.client, originPort }, tools.redis && onPath('redis-cli'));

    // --- summary
    console.log('\n## Summary (ratios of medians; targets from DESIGN §9)');
    const rows = results.flatMap((r) => r.ratios.map((x) => [r.title.split(' ')[0] + ' ' + x.label, fmt(x.value), REPEATS > 1 ? `${fmt(x.min)}–${fmt(x.max)}` : '–', x.target ? `${x.target.op === '>=' ? '≥' : '≤'} ${x.target.value}` : '–', verdict(x)]));
    if (scale) rows.push(...scale.summary.map((x) => [`f. ${x.label}`, fmt(x.value, x.digits ?? 2), x.range ?? '–', x.target ? `${x.target.op === '>=' ? '≥' : '<'} ${x.target.value}` : '–', x.target ? ((x.target.op === '>=' ? x.value >= x.target.value : x.value < x.target.value) ? 'PASS' : 'FAIL') : 'info']));
    console.log(table(['ratio or figure', 'value', 'per repeat', 'target', 'verdict'], rows));
    if (skipped.length) console.log(`skipped:\n${skipped.map((s) => `  - ${s}`).join('\n')}`);

    // --- optional profile
    let profile: ReturnType<typeof summarizeProfile> | undefined;
    if (PROFILE && tools.wrk) {
      profile = await profileRun(PROFILE === 'v1' || PROFILE === 'handshake' ? PROFILE : 'proxy', { startOne, stopMain: () => stop(portico!.process, 15_000), auth, resolution, tmp });
      portico = undefined;
    }

    const out = path.join(import.meta.dirname, 'results');
    mkdirSync(out, { recursive: true });
    const file = path.join(out, `${QUICK ? 'quick' : 'full'}-${started.toISOString().replace(/[:.]/g, '-')}.json`);
    writeFileSync(file, JSON.stringify({ started, quick: QUICK, seconds: SECONDS, repeats: REPEATS, connections: CONNECTIONS, machine: { cpu: os.cpus()[0]?.model, cores, loadavg: os.loadavg() }, pinning, resolution: resolution.mode, results, scale, skipped, profile }, null, 2));
    console.log(`\nresults: ${path.relative(process.cwd(), file)} (${((Date.now() - started.getTime()) / 1000).toFixed(0)} s)`);
  } finally {
    await cleanup();
  }
}

// ---------------------------------------------------------------------------------------------
// f. scale: 100k domains

interface ScaleRow {
  label: string;
  value: number;
  digits?: number;
  range?: string;
  target?: { op: '<' | '>='; value: number };
}

interface ScaleRun {
  count: number;
  state: 'embedded' | 'redis';
  stateLogMiB: number;
  generatedSeconds: number | null;
  starts: StartSample[];
  firstHandshake?: ClientResult;
  bulk?: Array<{ done: number; rssMiB: number; heapMiB?: number; externalMiB?: number; serverCpuMsPerHandshake: number; client: ClientResult['bulk']; errors: number }>;
  warmBulk?: { rssMiB: number; serverCpuMsPerHandshake: number; client: ClientResult['bulk'] };
  probe?: { seconds: number; startedAtAge: number; handshakes: ClientResult['bulk']; stalls: Array<{ age: number; ms: number }> };
  note?: string;
}

interface ScaleResult {
  runs: ScaleRun[];
  /** why Portico did not start on the Redis dataset with the shipped configuration */
  redisDefaultStart?: string;
  summary: ScaleRow[];
}

/** Starts Portico SCALE_STARTS times on one dataset, then measures handshakes on the last start. */
async function scaleRun(ctx: ScaleContext, ds: Dataset, run: ScaleRun, opts: { redisUrl?: string; env?: Record<string, string>; bulk: number; probeSeconds: number }): Promise<void> {
  const what = `${fmtInt(ds.count)} domains, ${run.state}`;
  let running: Portico | undefined;
  try {
    for (let k = 1; k <= SCALE_STARTS; k++) {
      const { portico, sample } = await startOnDataset(ds, ctx, k, ds.count - k, { redisUrl: opts.redisUrl, env: opts.env });
      run.starts.push(sample);
      console.log(`  [${k}/${SCALE_STARTS}] ${what}: "listening" logged ${fmtInt(sample.listeningMs)} ms, first handshake served ${fmtInt(sample.readyMs)} ms, idle from ${fmtInt(sample.settledMs)} ms after the spawn; then RSS ${fmt(sample.rssMiB, 0)} MiB (peak ${fmt(sample.peakRssMiB, 0)}), CPU ${fmt(sample.cpuSeconds, 2)} s`);
      if (k < SCALE_STARTS) await stop(portico.process, 15_000);
      else running = portico;
    }
    const portico = running!;
    const pid = portico.process.pid;
    // the route works end to end: a stored domain proxies to the origin
    const answer = await expectStatus(`${hostnameOf(0)} through Portico`, get({ scheme: 'https', port: portico.https, hostname: hostnameOf(0), path: '/' }), 200);
    if (answer.body.length !== 100) throw new Error(`${hostnameOf(0)}: expected the origin's 100-byte body, got ${answer.body.length} bytes`);
    // first handshakes: never-seen domains, alternating with the cached hostnameOf(0)
    const coldFrom = Math.ceil(ds.count / 10);
    const first = await runScaleClient(ctx, { port: portico.https, mode: 'alternate', from: coldFrom, count: Math.min(SCALE_COLD, Math.floor(ds.count / 4)), warm: hostnameOf(0) });
    run.firstHandshake = first;
    console.log(`  ${what}: first handshake to ${first.cold.n} never-seen domains p50 ${fmt(first.cold.p50ms)} ms, p99 ${fmt(first.cold.p99ms)} ms; to the cached domain in between p50 ${fmt(first.warm.p50ms)} ms, p99 ${fmt(first.warm.p99ms)} ms → cold lookup ${fmt(first.cold.p50ms - first.warm.p50ms)} ms${first.errors || first.wrongCertificate ? `; errors ${first.errors} (${first.lastError}), other certificate served ${first.wrongCertificate}` : ''}`);
    if (opts.probeSeconds > 0) {
      const at = Date.now();
      const probe = await runScaleClient(ctx, { port: portico.https, mode: 'probe', from: 0, count: 0, warm: hostnameOf(0), seconds: opts.probeSeconds, intervalMs: 20 });
      const age = (at - portico.spawnedAt) / 1000;
      run.probe = { seconds: opts.probeSeconds, startedAtAge: age, handshakes: probe.bulk, stalls: probe.stalls.map((x) => ({ age: x.at + age, ms: x.ms })) };
      const worst = [...run.probe.stalls].sort((x, y) => y.ms - x.ms)[0];
      console.log(`  ${what}: stall probe (a handshake to the cached domain every 20 ms for ${opts.probeSeconds} s): p50 ${fmt(probe.bulk.p50ms)} ms, ${run.probe.stalls.length} over 100 ms${worst ? `, longest ${fmtInt(worst.ms)} ms, begun ${fmt(worst.age, 1)} s after the spawn` : ''}`);
    }
    if (opts.bulk > 0) {
      run.bulk = [{ done: 0, rssMiB: procStatus(pid).rss, ...await memoryBreakdown(portico.admin), serverCpuMsPerHandshake: NaN, client: { n: 0, p50ms: NaN, p99ms: NaN, maxms: NaN, meanms: NaN }, errors: 0 }];
      const bulkFrom = Math.min(ds.count - opts.bulk, Math.ceil(ds.count / 5));
      if (bulkFrom < coldFrom + SCALE_COLD) throw new Error(`${fmtInt(opts.bulk)} cold handshakes in bulk need more than ${fmtInt(ds.count)} domains`);
      for (let done = 0; done < opts.bulk; done += SCALE_BULK_STEP) {
        const n = Math.min(SCALE_BULK_STEP, opts.bulk - done);
        const cpu0 = cpuSeconds(processTree(pid));
        const r = await runScaleClient(ctx, { port: portico.https, mode: 'bulk', from: bulkFrom + done, count: n, concurrency: SCALE_CONCURRENCY });
        const cpu = cpuSeconds(processTree(pid)) - cpu0;
        run.bulk.push({ done: done + n, rssMiB: procStatus(pid).rss, ...await memoryBreakdown(portico.admin), serverCpuMsPerHandshake: (cpu * 1000) / Math.max(1, r.bulk.n), client: r.bulk, errors: r.errors + r.wrongCertificate });
      }
      const cpu0 = cpuSeconds(processTree(pid));
      const w = await runScaleClient(ctx, { port: portico.https, mode: 'bulk', from: 0, count: SCALE_BULK_STEP, concurrency: SCALE_CONCURRENCY, warm: hostnameOf(0) });
      run.warmBulk = { rssMiB: procStatus(pid).rss, serverCpuMsPerHandshake: ((cpuSeconds(processTree(pid)) - cpu0) * 1000) / Math.max(1, w.bulk.n), client: w.bulk };
    }
  } finally {
    if (running) await stop(running.process, 15_000);
  }
}

async function runScale(ctx: ScaleContext, withRedis: boolean): Promise<ScaleResult> {
  const largest = SCALE_SIZES[SCALE_SIZES.length - 1];
  const redisToo = withRedis && process.env.BENCH_SCALE_REDIS !== '0';
  console.log(`\n## f. scale: ${SCALE_SIZES.map(fmtInt).join(' and ')} domains with stored certificates (embedded state${redisToo ? `; then ${fmtInt(largest)} with state and certificates in Redis` : ''})`);
  console.log([
    `Portico on core 0, started ${SCALE_STARTS}× per dataset (generated once in Portico's formats, one ECDSA P-256 certificate for every name); from the spawn on, a client on the load core tries a handshake for a never-seen domain every 5 ms: "first handshake served" is when one succeeds with the stored certificate.`,
    `Then ${SCALE_COLD} handshakes one at a time, each to a never-seen domain followed by one to a cached domain (tls.connect → secureConnect, no session, client on the load core).`,
    SCALE_PROBE_SECONDS > 0 ? `Then (${fmtInt(largest)}, embedded) a handshake to the cached domain every 20 ms for ${SCALE_PROBE_SECONDS} s, to see the event loop stall (certificate sweep every 60 s).` : '',
    SCALE_BULK > 0 ? `Then (${fmtInt(largest)}) ${fmtInt(SCALE_BULK)} handshakes to distinct never-seen domains, ${SCALE_CONCURRENCY} at a time, RSS read every ${fmtInt(SCALE_BULK_STEP)} (SNI cache: LRU of 1,000 SecureContexts), and ${fmtInt(SCALE_BULK_STEP)} to the cached domain for the CPU per cached handshake.` : '',
  ].filter(Boolean).join('\n'));
  const cacheRoot = path.join(import.meta.dirname, 'results', 'scale-cache');
  const out: ScaleResult = { runs: [], summary: [] };
  let biggest: Dataset | undefined;
  for (const count of SCALE_SIZES) {
    const ds: Dataset = await ensureDataset(cacheRoot, count);
    biggest = ds;
    console.log(`  ${fmtInt(count)} domains: ${ds.generatedSeconds === null ? 'dataset from the cache' : `dataset generated in ${fmt(ds.generatedSeconds, 1)} s (not measured)`} (${path.relative(ROOT, ds.dir)}), state log ${fmt(ds.stateLogMiB, 1)} MiB`);
    const run: ScaleRun = { count, state: 'embedded', stateLogMiB: ds.stateLogMiB, generatedSeconds: ds.generatedSeconds, starts: [] };
    out.runs.push(run);
    try {
      await scaleRun(ctx, ds, run, { bulk: count === largest ? SCALE_BULK : 0, probeSeconds: count === largest ? SCALE_PROBE_SECONDS : 0 });
    } catch (err) {
      console.log(`  ${fmtInt(count)} domains, embedded: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  if (redisToo && biggest) {
    // a Redis of its own on the load side, filled with the same domains and certificates (not measured)
    const dir = path.join(ctx.tmp, 'redis-scale');
    mkdirSync(dir, { recursive: true });
    const port = await freePort();
    const redis = spawnPinned('redis-scale', ctx.clientCpus, 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir]);
    try {
      await waitForPort(port);
      const t0 = performance.now();
      await loadRedis(biggest, port, ctx.originPort);
      console.log(`  ${fmtInt(biggest.count)} domains loaded into Redis in ${fmt((performance.now() - t0) / 1000, 1)} s (not measured); Redis RSS ${fmt(rssMiB([redis.pid]), 0)} MiB`);
      const redisUrl = `redis://127.0.0.1:${port}`;
      // first with the configuration as shipped (redis.commandTimeoutMs 150): does it start at all?
      try {
        const { portico, sample } = await startOnDataset(biggest, ctx, 0, biggest.count - 1, { redisUrl });
        await stop(portico.process, 15_000);
        console.log(`  ${fmtInt(biggest.count)} domains, redis (shipped config): starts, first handshake served ${fmtInt(sample.readyMs)} ms after the spawn`);
      } catch (err) {
        out.redisDefaultStart = (err as Error).message;
        console.log(`  ${fmtInt(biggest.count)} domains, redis (shipped config, redis.commandTimeoutMs 150): ${out.redisDefaultStart}`);
      }
      // then measured, with a command timeout long enough for the start-up reads
      const run: ScaleRun = { count: biggest.count, state: 'redis', stateLogMiB: NaN, generatedSeconds: null, starts: [], note: 'PORTICO_REDIS_COMMAND_TIMEOUT_MS=5000' };
      out.runs.push(run);
      await scaleRun(ctx, biggest, run, { redisUrl, env: { PORTICO_REDIS_COMMAND_TIMEOUT_MS: '5000' }, bulk: Math.min(SCALE_BULK, SCALE_BULK_STEP), probeSeconds: 0 });
    } catch (err) {
      console.log(`  redis mode: ${(err as Error).message.split('\n')[0]}`);
    } finally {
      await stop(redis);
    }
  }

  // --- tables
  const range = (xs: number[], digits = 0) => (xs.length > 1 ? `${fmt(Math.min(...xs), digits)}–${fmt(Math.max(...xs), digits)}` : '–');
  console.log('');
  console.log('times from the spawn; "idle from": background start-up work done (CPU < 5 % for 0.5 s), when RSS and CPU are read');
  console.log(table(['domains', 'state', '"listening" ms', 'min–max', 'first handshake served ms', 'min–max', 'idle from ms', 'RSS MiB', 'peak RSS MiB', 'CPU s'], out.runs.filter((r) => r.starts.length > 0).map((r) => [
    fmtInt(r.count), r.note ? `${r.state} (${r.note})` : r.state,
    fmtInt(median(r.starts.map((x) => x.listeningMs))), range(r.starts.map((x) => x.listeningMs)),
    fmtInt(median(r.starts.map((x) => x.readyMs))), range(r.starts.map((x) => x.readyMs)),
    fmtInt(median(r.starts.map((x) => x.settledMs))),
    fmt(median(r.starts.map((x) => x.rssMiB)), 0), fmt(median(r.starts.map((x) => x.peakRssMiB)), 0), fmt(median(r.starts.map((x) => x.cpuSeconds)), 2),
  ]), 2));
  console.log('');
  console.log(table(['domains', 'state', 'cold handshakes', 'cold p50 ms', 'cold p99 ms', 'cold max ms', 'cached p50 ms', 'cached p99 ms', 'cold lookup ms (p50 − p50)', 'errors'], out.runs.filter((r) => r.firstHandshake).map((r) => {
    const f = r.firstHandshake!;
    return [fmtInt(r.count), r.state, String(f.cold.n), fmt(f.cold.p50ms), fmt(f.cold.p99ms), fmt(f.cold.maxms), fmt(f.warm.p50ms), fmt(f.warm.p99ms), fmt(f.cold.p50ms - f.warm.p50ms), String(f.errors + f.wrongCertificate)];
  }), 2));
  for (const r of out.runs.filter((x) => x.bulk)) {
    console.log('');
    const rows = r.bulk!.map((b) => [b.done === 0 ? 'start (+ the handshakes above)' : `${fmtInt(b.done)} cold`, fmt(b.rssMiB, 0), fmt(b.heapMiB ?? NaN, 0), fmt(b.externalMiB ?? NaN, 0), b.done === 0 ? '–' : fmt(b.serverCpuMsPerHandshake), b.done === 0 ? '–' : fmt(b.client.p50ms), b.done === 0 ? '–' : fmt(b.client.p99ms), b.done === 0 ? '–' : fmt(b.client.maxms), String(b.errors)]);
    if (r.warmBulk) rows.push([`${fmtInt(SCALE_BULK_STEP)} to the cached domain`, fmt(r.warmBulk.rssMiB, 0), '', '', fmt(r.warmBulk.serverCpuMsPerHandshake), fmt(r.warmBulk.client.p50ms), fmt(r.warmBulk.client.p99ms), fmt(r.warmBulk.client.maxms), '–']);
    console.log(`${fmtInt(r.count)} domains, ${r.state}: ${SCALE_CONCURRENCY} handshakes at a time, each row ${fmtInt(SCALE_BULK_STEP)} more never-seen domains`);
    console.log(table(['after', 'RSS MiB', 'V8 heap MiB', 'external MiB', 'server CPU ms/handshake', 'client p50 ms', 'p99 ms', 'max ms', 'errors'], rows));
  }

  if (out.redisDefaultStart) console.log(`\nRedis, shipped configuration: ${out.redisDefaultStart}`);

  // --- summary rows
  for (const r of out.runs.filter((x) => x.starts.length > 0)) {
    const label = `${r.count >= 1000 ? `${r.count / 1000}k` : r.count} domains, ${r.state}`;
    const ready = r.starts.map((x) => x.readyMs / 1000);
    const listening = r.starts.map((x) => x.listeningMs / 1000);
    out.summary.push({ label: `${label}: start-up s (spawn → first handshake served)`, value: median(ready), range: range(ready, 2), target: { op: '<', value: 1 } });
    out.summary.push({ label: `${label}: spawn → "listening" logged s`, value: median(listening), range: range(listening, 2) });
    out.summary.push({ label: `${label}: spawn → idle (background start-up work done) s`, value: median(r.starts.map((x) => x.settledMs / 1000)), range: range(r.starts.map((x) => x.settledMs / 1000), 1) });
    out.summary.push({ label: `${label}: RSS after start (idle) MiB`, value: median(r.starts.map((x) => x.rssMiB)), digits: 0, range: range(r.starts.map((x) => x.rssMiB)), target: { op: '<', value: 150 } });
    if (r.firstHandshake) {
      out.summary.push({ label: `${label}: first handshake, cold domain p50 ms`, value: r.firstHandshake.cold.p50ms, target: { op: '<', value: 5 } });
      out.summary.push({ label: `${label}: first handshake, cold domain p99 ms`, value: r.firstHandshake.cold.p99ms });
      out.summary.push({ label: `${label}: cold lookup ms (cold − cached p50)`, value: r.firstHandshake.cold.p50ms - r.firstHandshake.warm.p50ms });
    }
    if (r.probe) out.summary.push({ label: `${label}: longest handshake in ${r.probe.seconds} s (cached domain, every 20 ms) ms`, value: Math.max(r.probe.handshakes.maxms, ...r.probe.stalls.map((x) => x.ms)), digits: 0 });
    if (r.bulk && r.bulk.length > 1) {
      const last = r.bulk[r.bulk.length - 1];
      out.summary.push({ label: `${label}: RSS after ${fmtInt(last.done)} cold handshakes MiB`, value: last.rssMiB, digits: 0, target: { op: '<', value: 150 } });
      const cpu = r.bulk.slice(1).map((b) => b.serverCpuMsPerHandshake);
      if (r.warmBulk) out.summary.push({ label: `${label}: server CPU ms per cold − per cached handshake`, value: median(cpu) - r.warmBulk.serverCpuMsPerHandshake });
    }
  }
  return out;
}

/** Whether Portico resumes a TLS session from a ticket it issued (a Node client offering it). */
async function ticketResumes(port: number): Promise<boolean> {
  const tls = await import('node:tls');
  const connect = (session?: Buffer) => new Promise<{ reused: boolean; session?: Buffer }>((resolve, reject) => {
    let ticket: Buffer | undefined;
    let reused = false;
    const socket = tls.connect({ host: '127.0.0.1', port, servername: 'bench.localhost', rejectUnauthorized: false, session });
    socket.on('session', (s: Buffer) => { ticket = s; });
    socket.once('secureConnect', () => {
      reused = socket.isSessionReused();
      socket.write('GET / HTTP/1.1\r\nHost: bench.localhost\r\nConnection: close\r\n\r\n');
    });
    socket.on('data', () => undefined);
    socket.once('error', reject);
    socket.once('close', () => resolve({ reused, session: ticket }));
  });
  const first = await connect();
  if (!first.session) return false;
  return (await connect(first.session)).reused;
}

async function profileRun(which: 'proxy' | 'v1' | 'handshake', ctx: { startOne: (args: string[]) => Promise<Portico>; stopMain: () => Promise<void>; auth: Record<string, string>; resolution: Resolution; tmp: string }) {
  console.log(`\n## CPU profile of Portico (${which}, ${SECONDS} s under load, node --cpu-prof)`);
  await ctx.stopMain();
  const dir = path.join(ctx.tmp, 'profile');
  mkdirSync(dir, { recursive: true });
  // same Redis and certs dir: the project and the key are there already
  const p = await ctx.startOne(['--cpu-prof', `--cpu-prof-dir=${dir}`]);
  const load = (seconds: number) => which === 'handshake'
    ? runHandshakes({ port: p.https, servername: 'bench.localhost', hostHeader: 'bench.localhost', path: '/', concurrency: HANDSHAKE_CONCURRENCY, seconds, maxRequests: 250_000, resume: false, groups: HANDSHAKE_GROUPS, cpus: pinning.client })
    : runWrk({ scheme: 'https', hostname: which === 'v1' ? 'api.localhost' : 'bench.localhost', port: p.https, path: which === 'v1' ? '/v1/categories' : '/', headers: which === 'v1' ? ctx.auth : undefined, connections: CONNECTIONS, seconds, cpus: pinning.client, resolution: ctx.resolution });
  await load(WARMUP);
  const r = await load(SECONDS);
  console.log(`under the profiler: ${fmtInt(r.rps)} req/s, p99 ${fmt(r.p99ms)} ms${r.errors ? `, errors: ${r.errorDetail}` : ""}${r.info ? `, ${r.info}` : ""}`);
  await stop(p.process, 15_000);
  for (let i = 0; i < 50 && !readdirSync(dir).some((f) => f.endsWith('.cpuprofile')); i++) await sleep(100);
  const file = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile')).map((f) => path.join(dir, f)).sort((a, b) => statSync(b).size - statSync(a).size)[0];
  if (!file) {
    console.log('no .cpuprofile was written');
    return undefined;
  }
  const kept = path.join(import.meta.dirname, 'results', `portico-${which}-${new Date().toISOString().replace(/[:.]/g, '-')}.cpuprofile`);
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

await main();
