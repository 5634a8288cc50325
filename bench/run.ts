// `npm run bench` — Portico against anchors measured in the same run on the same machine (DESIGN §9).
// Every figure is a ratio to an anchor: absolute numbers on a shared, noisy machine mean little alone.
//
// The run: start the load side (an origin, Redis) and the servers under test (Portico, nginx, the bare
// Node anchors), pinned — the server under test on core 0, everything else on the other core(s) —
// then measure each scenario of bench/scenarios/ (one file each, listed in scenarios/index.ts), print
// the summary and write the numbers to bench/results/. docs/performance.md describes the method and
// the variables (BENCH_QUICK, BENCH_ONLY, BENCH_VARIANT, BENCH_PROFILE, …).
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../test/helpers/free-port.ts';
import { NICE, choosePinning, coreTimes, processTree, sleep, spawnPinned, stop, stopAll, waitForPort } from './lib/proc.ts';
import { chooseResolution } from './lib/wrk.ts';
import { startNginx, type Nginx } from './lib/nginx.ts';
import { startOrigin } from './lib/origin.ts';
import { buildDist, provision, startPortico, type Portico } from './lib/portico.ts';
import { expectStatus, get } from './lib/check.ts';
import { startBareProxy, startBareServer } from './lib/bare.ts';
import { ensureTools, version } from './lib/tools.ts';
import { usePinning, runScenario, type ScenarioResult } from './lib/measure.ts';
import { printSummary } from './lib/report.ts';
import { profileRun } from './lib/profile-run.ts';
import type { BenchContext } from './lib/context.ts';
import { CONNECTIONS, PROFILE, QUICK, REPEATS, SECONDS, VARIANT, VARIANT_ENTRY, VARIANT_NODE_ARGS, WARMUP } from './lib/settings.ts';
import { SCENARIOS } from './scenarios/index.ts';

const ROOT = path.resolve(import.meta.dirname, '..');
const ONLY = new Set((process.env.BENCH_ONLY ?? SCENARIOS.map((s) => s.id).join(',')).split(',').map((s) => s.trim()).filter(Boolean));

async function main(): Promise<void> {
  const cores = os.availableParallelism();
  const pinning = choosePinning(cores);
  usePinning(pinning);
  if (pinning.client) spawnSync('taskset', ['-a', '-p', '-c', pinning.client, String(process.pid)], { stdio: 'ignore' });
  if (NICE) spawnSync('renice', ['-n', String(NICE), '-p', String(process.pid)], { stdio: 'ignore' });
  const tools = ensureTools();
  buildDist();
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'portico-bench-'));
  const skipped: string[] = [];
  const results: ScenarioResult[] = [];
  const started = new Date();

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
  const resolution = chooseResolution(tmp);
  console.log(`SNI: ${resolution.note}`);

  const cleanup = async () => {
    await stopAll();
    rmSync(tmp, { recursive: true, force: true });
  };
  process.once('SIGINT', () => { void cleanup().then(() => process.exit(130)); });

  try {
    // --- the load side: origin and Redis
    const origin = await startOrigin(path.join(tmp, 'origin'), pinning.client, tools.nginx);
    console.log(`origin: ${origin.kind === 'nginx' ? 'nginx answering 100 bytes itself (return 200)' : 'bench/origin.ts (node:http; nginx is not installed)'}, on the load core`);
    let redisUrl: string | undefined;
    if (tools.redis) {
      const port = await freePort();
      mkdirSync(path.join(tmp, 'redis'));
      spawnPinned('redis', pinning.client, 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', path.join(tmp, 'redis')]);
      await waitForPort(port);
      redisUrl = `redis://127.0.0.1:${port}`;
    }

    // --- Portico, with the bench project, an API key and three categories
    const certsDir = path.join(tmp, 'certs');
    let starts = 0;
    const startOne = (nodeArgs: string[] = []) => startPortico({ dataDir: path.join(tmp, 'data'), certsDir, logFile: path.join(tmp, `portico-${++starts}.log`), cpus: pinning.server, redisUrl, nodeArgs });
    let portico: Portico | undefined = await startOne();
    console.log(`Portico: ${path.relative(ROOT, portico.entry)}, pid ${portico.process.pid}, ${processTree(portico.process.pid).length} process(es), state ${redisUrl ? 'in Redis (PORTICO_REDIS_URL)' : 'embedded (no redis-server)'}, access log on → file`);
    const { key } = await provision(portico, origin.port);
    // BENCH_VARIANT='NAME=value …': a second Portico with these variables beside the first (Redis
    // state only: both serve the same accounts, keys and project), measured interleaved with it
    let variant: Portico | undefined;
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
    // /v1 on embedded state (what `npm start` runs without PORTICO_REDIS_URL): scenario b's
    // informational row, a Portico of its own with the same account, categories and answer
    let embedded: BenchContext['embedded'];
    if (redisUrl && ONLY.has('v1') && tools.wrk) {
      const p = await startPortico({ dataDir: path.join(tmp, 'data-embedded'), certsDir, logFile: path.join(tmp, 'portico-embedded.log'), cpus: pinning.server });
      const embeddedAuth = { authorization: `Bearer ${(await provision(p, origin.port)).key}` };
      for (const category of JSON.parse(v1Body.toString('utf8')) as Array<{ name: string; description: string }>) {
        await expectStatus('POST /v1/categories (embedded)', get({ scheme: 'https', port: p.https, hostname: 'api.localhost', path: '/v1/categories', method: 'POST', headers: { ...embeddedAuth, 'content-type': 'application/json' }, body: JSON.stringify({ name: category.name, description: category.description }) }), 201);
      }
      const answer = await expectStatus('GET /v1/categories (embedded)', get({ scheme: 'https', port: p.https, hostname: 'api.localhost', path: '/v1/categories', headers: embeddedAuth }), 200);
      if (answer.body.length !== v1Body.length) throw new Error(`Portico on embedded state answers ${answer.body.length} bytes for /v1/categories, the Redis one ${v1Body.length}`);
      embedded = { portico: p, auth: embeddedAuth };
    }

    // --- anchors
    let nginx: Nginx | undefined;
    if (tools.nginx) {
      try {
        nginx = await startNginx(path.join(tmp, 'nginx'), { certFile: portico.certFile, keyFile: portico.keyFile, originPort: origin.port, cpus: pinning.server });
        await expectStatus('nginx → origin', get({ scheme: 'https', port: nginx.https, hostname: 'bench.localhost', path: '/' }), 200);
      } catch (err) {
        console.log(`note: nginx did not start, its scenarios are skipped: ${(err as Error).message.split('\n')[0]}`);
        await stop(nginx?.process);
        nginx = undefined;
      }
    } else {
      console.log('note: nginx is not installed: the nginx anchors are skipped');
    }
    const bare = await startBareServer('bare-https', tmp, pinning.server, portico, v1Body, 'https');
    const bareLimited = redisUrl && (ONLY.has('v1') || ONLY.has('topologies')) ? await startBareServer('bare-https-limited', tmp, pinning.server, portico, v1Body, 'https', { redisUrl }) : undefined;
    const bareAfterReads = ONLY.has('v1') ? await startBareServer('bare-https-after-reads', tmp, pinning.server, portico, v1Body, 'https', { afterReads: true }) : undefined;
    const bareProxy = await startBareProxy(pinning.server, portico, origin.port);

    // --- the scenarios
    const ctx: BenchContext = { tmp, cores, pinning, tools, resolution, origin, redisUrl, certsDir, portico, auth, v1Body, variant, embedded, nginx, bare, bareLimited, bareAfterReads, bareProxy, skip: (note) => skipped.push(note) };
    for (const definition of SCENARIOS) {
      if (!ONLY.has(definition.id)) {
        skipped.push(`${definition.id}: not in BENCH_ONLY`);
        continue;
      }
      const planned = await definition.plan(ctx);
      if (typeof planned === 'string') skipped.push(`${definition.id}: ${planned}`);
      else results.push(await runScenario(planned));
    }
    printSummary(results, skipped);

    // --- optional profile
    let profile: Awaited<ReturnType<typeof profileRun>>;
    if (PROFILE) {
      const which = PROFILE === 'v1' || PROFILE === 'handshake' || PROFILE === 'h2' ? PROFILE : 'proxy';
      const main = portico;
      profile = await profileRun(which, { startOne, stopMain: () => stop(main.process, 15_000), auth, resolution, tmp, pinning });
      portico = undefined;
    }

    const out = path.join(import.meta.dirname, 'results');
    mkdirSync(out, { recursive: true });
    const file = path.join(out, `${QUICK ? 'quick' : 'full'}-${started.toISOString().replace(/[:.]/g, '-')}.json`);
    writeFileSync(file, JSON.stringify({ started, quick: QUICK, seconds: SECONDS, repeats: REPEATS, connections: CONNECTIONS, machine: { cpu: os.cpus()[0]?.model, cores, loadavg: os.loadavg() }, pinning, resolution: resolution.mode, origin: origin.kind, results, skipped, profile }, null, 2));
    console.log(`\nresults: ${path.relative(process.cwd(), file)} (${((Date.now() - started.getTime()) / 1000).toFixed(0)} s)`);
  } finally {
    await cleanup();
  }
}

await main();
