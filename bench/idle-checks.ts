// Idle CPU with 100k domains whose DNS is checked daily (DESIGN §6: the scheduler must not grow per tick
// with the number of domains). Portico is started on the bench's 100k dataset (bench/lib/scale.ts)
// in turn as this checkout and as an older build without automatic checks (BASELINE_TREE: a checkout
// of the commit before them, with node_modules), and the CPU each uses in IDLE_SECONDS with no traffic
// is read from /proc. The first start of this checkout seeds 100k due times (once per data dir); it
// is measured apart. DNS goes to a local challtestsrv, so the checks that come due (about 70 a minute
// at one check per domain per day) cost their real work and no network. A second data dir has the
// same 100k jobs spread over a year (PORTICO_VERIFIED_RECHECK_MS of 365 days, about 0.2 checks a
// minute): what the scheduler itself costs with 100k due times stored, apart from the checks.
//
//   BASELINE_TREE=/tmp/portico-old node_modules/.bin/node bench/idle-checks.ts
import { cpSync, existsSync, mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { ensureDataset, prepareRun } from './lib/scale.ts';
import { startPortico, type Portico } from './lib/portico.ts';
import { cpuSeconds, processTree, sleep, stop } from './lib/proc.ts';
import { startChalltestsrv } from '../test/helpers/challtestsrv.ts';

const ROOT = path.resolve(import.meta.dirname, '..');
const COUNT = Number(process.env.BENCH_SCALE_COUNT ?? 100_000);
const IDLE_SECONDS = Number(process.env.IDLE_SECONDS ?? 60);
const ROUNDS = Number(process.env.ROUNDS ?? 2);
const baseline = process.env.BASELINE_TREE;
const tmp = path.join(ROOT, 'bench/results/idle-checks');

const dns = await startChalltestsrv();
const ds = await ensureDataset(path.join(ROOT, 'bench/results/scale-cache'), COUNT);
console.log(`dataset: ${COUNT} verified domains${ds.generatedSeconds === null ? ' (cached)' : ` (made in ${ds.generatedSeconds.toFixed(0)} s)`}`);

/** a data dir of its own with a copy of the domain bodies (this checkout writes checks into them) */
function dataDirFor(name: string): string {
  const dir = path.join(tmp, name);
  prepareRun(ds, dir, 9);
  rmSync(path.join(dir, 'domains'));
  cpSync(ds.domainsDir, path.join(dir, 'domains'), { recursive: true });
  return dir;
}

async function settle(pids: number[], maxMs: number): Promise<number> {
  const started = Date.now();
  let cpu = cpuSeconds(pids);
  while (Date.now() - started < maxMs) {
    await sleep(1000);
    const now = cpuSeconds(pids);
    if (now - cpu < 0.05) break;
    cpu = now;
  }
  return (Date.now() - started) / 1000;
}

async function run(label: string, tree: string, dataDir: string, env: Record<string, string> = {}): Promise<number> {
  mkdirSync(tmp, { recursive: true });
  const portico: Portico = await startPortico({
    dataDir,
    certsDir: ds.certsDir,
    logFile: path.join(tmp, `${label}.log`),
    cpus: null,
    timeoutMs: 120_000,
    entry: path.join(tree, 'src/cli/main.ts'),
    env: { PORTICO_CONFIG: path.join(tree, 'config/portico.yaml'), PORTICO_DNS_SERVERS: dns.dnsServer, PORTICO_ACME_DIRECTORY: 'https://127.0.0.1:9/directory', ...env },
  });
  try {
    const pids = processTree(portico.process.pid);
    // this checkout seeds the due times once (mostly waiting on fsync, so it can look idle): wait for it
    const seeded = path.join(dataDir, 'schedule', 'done-domain-checks-seeded');
    for (const until = Date.now() + 600_000; tree === ROOT && !existsSync(seeded) && Date.now() < until; ) await sleep(500);
    const settled = await settle(pids, 180_000);
    const before = cpuSeconds(pids);
    await sleep(IDLE_SECONDS * 1000);
    const used = cpuSeconds(pids) - before;
    const perMinute = (used * 60_000) / IDLE_SECONDS;
    console.log(`${label.padEnd(28)} settled after ${settled.toFixed(0)} s; idle: ${perMinute.toFixed(0)} ms CPU per minute`);
    return perMinute;
  } finally {
    await stop(portico.process, 5000);
  }
}

const YEARLY = { PORTICO_VERIFIED_RECHECK_MS: String(365 * 86_400_000) };
const daily = dataDirFor('new');
const yearly = dataDirFor('new-yearly');
// the first start seeds the due times of 100k domains (once per data dir)
const seedStart = Date.now();
await run('this checkout, first start', ROOT, daily);
console.log(`(first start, seeding included: ${((Date.now() - seedStart) / 1000).toFixed(0)} s)`);
await run('yearly checks, first start', ROOT, yearly, YEARLY);
const results: Record<string, number[]> = { daily: [], yearly: [], old: [] };
const oldDir = baseline ? dataDirFor('old') : null;
for (let round = 0; round < ROUNDS; round++) {
  results.daily.push(await run(`daily checks (round ${round + 1})`, ROOT, daily));
  results.yearly.push(await run(`yearly checks (round ${round + 1})`, ROOT, yearly, YEARLY));
  if (baseline && oldDir) results.old.push(await run(`baseline (round ${round + 1})`, baseline, oldDir));
}
const median = (xs: number[]) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`median idle CPU per minute: daily checks ${median(results.daily).toFixed(0)} ms, yearly checks ${median(results.yearly).toFixed(0)} ms${baseline ? `, baseline without checks ${median(results.old).toFixed(0)} ms` : ''}`);
await dns.stop();
