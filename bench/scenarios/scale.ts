// f. Scale: 100,000 domains with stored certificates (embedded state, generated on disk and cached in
// bench/results/scale-cache/), then the same in Redis: start-up time, RSS, the first handshake for a
// cold domain read from storage against a cached one, RSS over cold handshakes against the SNI cache
// bound, event-loop stalls; 1,000 domains in the same run for comparison.
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { freePort } from '../../test/helpers/free-port.ts';
import type { ScenarioDefinition } from '../lib/scenario.ts';
import type { Figure } from '../lib/measure.ts';
import { median } from '../lib/measure.ts';
import { fmt, fmtInt, table } from '../lib/report.ts';
import { cpuSeconds, onPath, processTree, rssMiB, spawnPinned, stop, waitForPort } from '../lib/proc.ts';
import { expectStatus, get } from '../lib/check.ts';
import type { Portico } from '../lib/portico.ts';
import { ensureDataset, hostnameOf, loadRedis, memoryBreakdown, procStatus, runScaleClient, startOnDataset, type ClientResult, type Dataset, type ScaleContext, type StartSample } from '../lib/scale.ts';
import { QUICK } from '../lib/settings.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
// the dataset sizes, starts per size, cold handshakes measured one by one, and the cold handshakes
// (to distinct domains) made in bulk to watch RSS against the SNI cache bound (1,000)
const SCALE_SIZES = (process.env.BENCH_SCALE_DOMAINS ?? '1000,100000').split(',').map(Number).filter((n) => n > 0).sort((a, b) => a - b);
const SCALE_STARTS = QUICK ? 1 : 3;
const SCALE_COLD = 200;
const SCALE_BULK = Number(process.env.BENCH_SCALE_HANDSHAKES ?? (QUICK ? 1000 : 20_000));
const SCALE_BULK_STEP = 1000;
const SCALE_CONCURRENCY = 8;
// a handshake to a cached domain every 20 ms for 70 s (crosses the 60 s certificate sweep): full runs only
const SCALE_PROBE_SECONDS = Number(process.env.BENCH_SCALE_PROBE ?? (QUICK ? 0 : 70));

export const scenario: ScenarioDefinition = {
  id: 'scale',
  plan(ctx) {
    return {
      id: 'scale',
      title: `f. scale: ${SCALE_SIZES.map(fmtInt).join(' and ')} domains with stored certificates`,
      run: async () => (await runScale({ tmp: ctx.tmp, cpus: ctx.pinning.server, clientCpus: ctx.pinning.client, originPort: ctx.origin.port }, ctx.tools.redis && onPath('redis-cli'))).summary,
    };
  },
};

type ScaleRow = Figure;

interface ScaleRun {
  count: number;
  state: 'embedded' | 'redis';
  stateLogMiB: number;
  generatedSeconds: number | null;
  /** the unmeasured first start on the dataset, which schedules every stored domain's first DNS check */
  firstStart?: StartSample;
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
    // The first start on a dataset schedules the first automatic DNS check of every stored domain: a
    // step taken once for domains stored before automatic checks existed, and persisted. It runs
    // here, unmeasured, so the measured starts are the ones an operator sees every time after it.
    const once = await startOnDataset(ds, ctx, 0, ds.count - SCALE_STARTS - 1, { redisUrl: opts.redisUrl, env: opts.env });
    await stop(once.portico.process, 15_000);
    run.firstStart = once.sample;
    console.log(`  ${what}: first start on the dataset (schedules each stored domain's first DNS check, once; not measured): idle from ${fmtInt(once.sample.settledMs)} ms after the spawn, CPU ${fmt(once.sample.cpuSeconds, 2)} s, peak RSS ${fmt(once.sample.peakRssMiB, 0)} MiB`);
    for (let k = 1; k <= SCALE_STARTS; k++) {
      const { portico, sample } = await startOnDataset(ds, ctx, k, ds.count - k, { redisUrl: opts.redisUrl, env: opts.env, keepData: true });
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
  console.log(`(embedded state${redisToo ? `; then ${fmtInt(largest)} with state and certificates in Redis` : ''})`);
  console.log([
    `Portico on core 0, started ${SCALE_STARTS}× per dataset (generated once in Portico's formats, one ECDSA P-256 certificate for every name); from the spawn on, a client on the load core tries a handshake for a never-seen domain every 5 ms: "first handshake served" is when one succeeds with the stored certificate.`,
    `Then ${SCALE_COLD} handshakes one at a time, each to a never-seen domain followed by one to a cached domain (tls.connect → secureConnect, no session, client on the load core).`,
    SCALE_PROBE_SECONDS > 0 ? `Then (${fmtInt(largest)}, embedded) a handshake to the cached domain every 20 ms for ${SCALE_PROBE_SECONDS} s, to see the event loop stall (certificate sweep every 60 s).` : '',
    SCALE_BULK > 0 ? `Then (${fmtInt(largest)}) ${fmtInt(SCALE_BULK)} handshakes to distinct never-seen domains, ${SCALE_CONCURRENCY} at a time, RSS read every ${fmtInt(SCALE_BULK_STEP)} (SNI cache: LRU of 1,000 SecureContexts), and ${fmtInt(SCALE_BULK_STEP)} to the cached domain for the CPU per cached handshake.` : '',
  ].filter(Boolean).join('\n'));
  const cacheRoot = path.join(ROOT, 'bench', 'results', 'scale-cache');
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
    if (r.firstStart) out.summary.push({ label: `${label}: first start on the dataset, once (schedules every domain's first DNS check) CPU s`, value: r.firstStart.cpuSeconds });
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

