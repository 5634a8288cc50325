// How a scenario is measured: its targets (the servers under test and their load) are warmed up, then
// measured REPEATS times, interleaved and in reversed order every other repeat, so a drift in the
// machine's load does not always favour the same target. Each measurement reads the server's CPU
// (its process tree, from /proc) over the load's own window; ratios are ratios of medians.
import { coreTimes, cpuSeconds, rssMiB, type Pinning } from './proc.ts';
import type { LoadResult } from './wrk.ts';
import { REPEATS, SECONDS, WARMUP } from './settings.ts';
import { fmt, fmtInt, printScenario } from './report.ts';

export interface Target {
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

export interface Sample extends LoadResult {
  cpuPct: number;
  perCpuSecond: number;
  rss: number;
  serverCoreOther: number | null;
  clientCoreBusy: number | null;
  note?: string;
}

export interface Ratio {
  label: string;
  /** target names */
  num: string;
  den: string;
  metric: 'rps' | 'p99ms' | 'perCpuSecond';
  target?: { op: '>=' | '<='; value: number };
}

/** A figure that is not a ratio of two targets (the scale and stalled-stream scenarios) */
export interface Figure {
  label: string;
  value: number;
  digits?: number;
  range?: string;
  target?: { op: '<' | '>=' | '<='; value: number };
}

/** A scenario measured by the runner: targets under load, and the ratios between them. */
export interface Measured {
  id: string;
  title: string;
  describe: string;
  targets: Target[];
  ratios: Ratio[];
  /** servers of this scenario alone: started just before it and stopped after, so they idle on no other */
  setup?: () => Promise<void>;
  teardown?: () => Promise<void>;
}

/** A scenario that measures itself (prints its own tables) and returns its summary figures. */
export interface Custom {
  id: string;
  title: string;
  run: () => Promise<Figure[]>;
}

export interface ScenarioResult {
  id: string;
  title: string;
  describe: string;
  rows: Array<{ name: string; samples: Sample[] }>;
  ratios: Array<Ratio & { value: number; min: number; max: number }>;
  figures: Figure[];
}

let pinning: Pinning = { server: null, client: null, note: '' };
export const usePinning = (p: Pinning) => {
  pinning = p;
};

export function expand(cores: string): number[] {
  return cores.split(',').flatMap((part) => {
    const [a, b] = part.split('-').map(Number);
    return b === undefined ? [a] : Array.from({ length: b - a + 1 }, (_, i) => a + i);
  });
}

export const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

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

export async function runScenario(s: Measured | Custom): Promise<ScenarioResult> {
  if ('run' in s) {
    console.log(`\n## ${s.title}`);
    return { id: s.id, title: s.title, describe: '', rows: [], ratios: [], figures: await s.run() };
  }
  console.log(`\n## ${s.title}\n${s.describe}`);
  await s.setup?.();
  try {
    return await measureScenario(s);
  } finally {
    await s.teardown?.();
  }
}

async function measureScenario(s: Measured): Promise<ScenarioResult> {
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
  const ratios = s.ratios.filter((ratio) => samples.has(ratio.num) && samples.has(ratio.den)).map((ratio) => {
    const num = pick(ratio.num, ratio.metric);
    const den = pick(ratio.den, ratio.metric);
    const each = num.map((n, i) => n / den[i]);
    return { ...ratio, value: median(num) / median(den), min: Math.min(...each), max: Math.max(...each) };
  });
  const result: ScenarioResult = { id: s.id, title: s.title, describe: s.describe, rows: s.targets.map((t) => ({ name: t.name, samples: samples.get(t.name)! })), ratios, figures: [] };
  printScenario(result);
  return result;
}
