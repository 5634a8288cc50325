// The 100k-domain scenario (DESIGN §8–§9, issue 7): a data dir and a certs dir written straight to
// disk in Portico's own formats, then Portico started on them and measured from outside — start-up
// time, RSS, and the first handshake for a domain whose certificate is read from storage, against a
// domain whose SecureContext is cached.
//
// Formats written here (keep in step with src/; the cache is keyed by a fingerprint of these files,
// and every new dataset is read back through Portico's own store code before it is used):
// - src/state/append-log.ts: `<crc32 hex, 8> <json>\n` per record; src/state/embedded-tables.ts: records
//   {op:'put', t, k, v} in tables 'accounts' and 'projects';
// - src/state/embedded-domains.ts: `<data dir>/domains.index`, the domain index (written with
//   src/state/domain-snapshot.ts's own encoder), `<data dir>/domains/<hostname>.json` (the Domain
//   without its certificate state) and `<hostname>.certificate.json` (CertificateState);
// - src/certs/file-store.ts: `<certs>/live/<hostname>/{cert.pem,key.pem,meta.json}` and the renewal
//   index under `<certs>/renewals/` (written through the file store itself);
// - Redis (src/state/redis-domains.ts, src/state/redis-routes.ts, src/certs/redis-store.ts): see
//   ensureRedisCommands().
// One real self-signed ECDSA P-256 certificate and key serve every hostname (its SAN does not name
// them; the handshake does not care, and making 100k keys would take minutes). Generating is not
// measured; the result is cached under bench/results/scale-cache/ and reused.
import { spawn } from 'node:child_process';
import { createHash, X509Certificate } from 'node:crypto';
import { appendFileSync, copyFileSync, existsSync, mkdirSync, openSync, closeSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync, writeSync } from 'node:fs';
import tls from 'node:tls';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import { ensureFallbackCertificate, selfSigned } from '../../src/certs/fallback.ts';
import { openFileCertStores } from '../../src/certs/file-store.ts';
import { renewalOpens } from '../../src/certs/types.ts';
import { encodeSnapshot, type IndexEntry } from '../../src/state/domain-snapshot.ts';
import { freePort } from '../../test/helpers/free-port.ts';
import { cpuSeconds, output, processTree, sleep, stop, wrap } from './proc.ts';
import { startPortico, type Portico } from './portico.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
/** bump when the generator changes; the sources whose formats it copies are fingerprinted too */
const FORMAT = 3;
const FORMAT_SOURCES = [
  'src/state/append-log.ts', 'src/state/embedded.ts', 'src/state/embedded-tables.ts', 'src/state/embedded-domains.ts', 'src/state/embedded-domain-files.ts',
  'src/state/domain-snapshot.ts', 'src/state/redis-domains.ts',
  'src/state/redis-routes.ts', 'src/certs/file-store.ts', 'src/certs/redis-store.ts', 'src/certs/types.ts',
];
export const SCALE_CN = 'portico-bench-scale';
const PREFIX = 'www.site-';
const SUFFIX = '.example';
const DOMAINS_PER_PROJECT = 1000;
const ACCOUNT = 'acc_scale';
const CREATED = '2026-01-01T00:00:00.000Z';
const CLIENT = path.join(import.meta.dirname, '..', 'scale-client.ts');
// the fallback certificate Portico would make on first start (config/portico.yaml's API hosts)
const FALLBACK_NAMES = ['api.localhost', 'localhost', '127.0.0.1', 'api.staging.localhost'];

export const hostnameOf = (i: number) => `${PREFIX}${String(i).padStart(6, '0')}${SUFFIX}`;

export interface Dataset {
  count: number;
  dir: string;
  stateLog: string;
  /** <data dir>/domains.index */
  domainIndex: string;
  /** <data dir>/domains: one body and one certificate-state file per domain */
  domainsDir: string;
  certsDir: string;
  projects: string[];
  /** seconds spent making it, or null when it came from the cache */
  generatedSeconds: number | null;
  stateLogMiB: number;
}

const line = (record: unknown) => {
  const json = JSON.stringify(record);
  return `${crc32(json).toString(16).padStart(8, '0')} ${json}\n`;
};

function fingerprint(): string {
  const hash = createHash('sha256').update(String(FORMAT));
  for (const file of FORMAT_SOURCES) hash.update(existsSync(path.join(ROOT, file)) ? readFileSync(path.join(ROOT, file)) : file);
  return hash.digest('hex').slice(0, 10);
}

const domainOf = (i: number, projects: string[]) => ({
  hostname: hostnameOf(i),
  projectId: projects[Math.floor(i / DOMAINS_PER_PROJECT)],
  accountId: ACCOUNT,
  primary: i % DOMAINS_PER_PROJECT === 0,
  status: 'verified' as const,
  apex: false,
  records: [{ type: 'CNAME', name: 'www', value: 'edge.localhost', ttl: 3600 }],
  diagnostics: [],
  createdAt: CREATED,
  verifiedAt: CREATED,
});

/** the domain index of the dataset (every domain verified); also the route snapshot in Redis */
const indexOf = (count: number, projects: string[]) =>
  encodeSnapshot((function* () {
    for (let i = 0; i < count; i++) yield [hostnameOf(i), { projectId: projects[Math.floor(i / DOMAINS_PER_PROJECT)], status: 'verified' }] as [string, IndexEntry];
  })());

const projectOf = (id: string, p: number, upstream: string) => ({ id, accountId: ACCOUNT, name: `scale-${p}`, upstream, createdAt: CREATED });

export async function ensureDataset(cacheRoot: string, count: number): Promise<Dataset> {
  const key = `v${FORMAT}-${fingerprint()}-n${count}`;
  const dir = path.join(cacheRoot, key);
  const stateLog = path.join(dir, 'state.log');
  const domainIndex = path.join(dir, 'domains.index');
  const domainsDir = path.join(dir, 'domains');
  const certsDir = path.join(dir, 'certs');
  const marker = path.join(dir, 'complete.json');
  const projectCount = Math.max(1, Math.ceil(count / DOMAINS_PER_PROJECT));
  const projects = Array.from({ length: projectCount }, (_, p) => `prj_scale${String(p).padStart(4, '0')}`);
  const sizeOf = () => readFileSync(stateLog).length / 1048576;
  if (existsSync(marker)) return { count, dir, stateLog, domainIndex, domainsDir, certsDir, projects, generatedSeconds: null, stateLogMiB: sizeOf() };

  const t0 = performance.now();
  // datasets of the same size in older formats take 1–2 GB each: replace them
  if (existsSync(cacheRoot)) for (const old of readdirSync(cacheRoot)) if (old.endsWith(`-n${count}`) && old !== key) rmSync(path.join(cacheRoot, old), { recursive: true, force: true });
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(path.join(certsDir, 'live'), { recursive: true, mode: 0o700 });
  mkdirSync(domainsDir, { recursive: true, mode: 0o700 });
  await ensureFallbackCertificate(certsDir, FALLBACK_NAMES);
  const pair = await selfSigned([SCALE_CN], 3650);
  const leaf = new X509Certificate(pair.cert);
  const notBefore = new Date(leaf.validFrom).toISOString();
  const notAfter = new Date(leaf.validTo).toISOString();
  const meta = { notBefore, notAfter, issuer: SCALE_CN };
  const certificateState = JSON.stringify({ status: 'issued', issuer: SCALE_CN, notAfter });

  // the state log: one account and a project per 1,000 domains; the upstream is set for each run
  // (the origin's port changes): see prepareRun()
  let chunk = line({ op: 'put', t: 'accounts', k: ACCOUNT, v: { id: ACCOUNT, plan: 'enterprise', limits: { perMinute: 100_000_000, perDay: 1_000_000_000 }, createdAt: CREATED } });
  for (const [p, id] of projects.entries()) chunk += line({ op: 'put', t: 'projects', k: id, v: projectOf(id, p, 'http://127.0.0.1:9') });
  writeFileSync(stateLog, chunk);
  // the domain index: every domain verified, routed to its project
  writeFileSync(domainIndex, indexOf(count, projects), { mode: 0o600 });

  // what each domain carries, and its certificate (through the file store: files and renewal index)
  const certificates = openFileCertStores(certsDir, 'https://127.0.0.1:9/directory').certificates;
  for (let i = 0; i < count; i++) {
    const hostname = hostnameOf(i);
    writeFileSync(path.join(domainsDir, `${hostname}.json`), JSON.stringify(domainOf(i, projects)), { mode: 0o600 });
    writeFileSync(path.join(domainsDir, `${hostname}.certificate.json`), certificateState, { mode: 0o600 });
    await certificates.put({ hostname, certPem: pair.cert, keyPem: pair.key, ...meta });
  }
  const ds: Dataset = { count, dir, stateLog, domainIndex, domainsDir, certsDir, projects, generatedSeconds: (performance.now() - t0) / 1000, stateLogMiB: sizeOf() };
  await checkEmbedded(ds);
  writeFileSync(marker, JSON.stringify({ format: FORMAT, sources: FORMAT_SOURCES, count, projects: projects.length, generatedSeconds: ds.generatedSeconds, at: new Date().toISOString() }));
  return ds;
}

/** Reads a new dataset back through Portico's own stores: a format that drifted from src/ fails here. */
async function checkEmbedded(ds: Dataset): Promise<void> {
  const { openEmbeddedStores } = await import('../../src/state/embedded.ts');
  const { openFileCertStores } = await import('../../src/certs/file-store.ts');
  const dataDir = path.join(ds.dir, 'check');
  prepareRun(ds, dataDir, 9);
  const stores = await openEmbeddedStores(dataDir);
  try {
    const last = hostnameOf(ds.count - 1);
    const { verified } = await stores.domains.countByStatus();
    const domain = await stores.domains.get(last);
    const certs = openFileCertStores(ds.certsDir, 'https://127.0.0.1:9/directory').certificates;
    const certificate = await certs.get(last);
    const { lt7d, lt30d, ge30d } = await certs.summary(Date.now());
    const problems = [
      verified !== ds.count ? `${verified} verified domains instead of ${ds.count}` : '',
      stores.domains.indexedRoute(last)?.projectId === ds.projects.at(-1) ? '' : `no route for ${last}`,
      domain?.status !== 'verified' || domain.certificate?.status !== 'issued' ? `${last} reads back as ${JSON.stringify(domain)?.slice(0, 200)}` : '',
      certificate?.certPem.includes('BEGIN CERTIFICATE') ? '' : `no certificate for ${last}`,
      lt7d + lt30d + ge30d === ds.count ? '' : `${lt7d + lt30d + ge30d} certificates in the renewal index instead of ${ds.count}`,
    ].filter(Boolean);
    if (problems.length) throw new Error(`the generated dataset does not match Portico's formats (src/ changed?): ${problems.join('; ')}`);
  } finally {
    await stores.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

// --- Redis mode: the same domains and certificates as Redis keys (src/state/redis-domains.ts,
// src/certs/redis-store.ts), loaded with `redis-cli --pipe` from a RESP file kept with the dataset

const resp = (args: string[]) => `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
/** a command whose last argument is binary */
const respBytes = (args: string[], bytes: Buffer) =>
  Buffer.concat([Buffer.from(`*${args.length + 1}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}$${bytes.length}\r\n`), bytes, Buffer.from('\r\n')]);

const projectCommands = (ds: Dataset, upstream: string) =>
  ds.projects.flatMap((id, p) => {
    const project = projectOf(id, p, upstream);
    return [resp(['SET', `portico:project:${id}`, JSON.stringify(project)]), resp(['SADD', 'portico:projects', id]), resp(['SET', `portico:project-name:${project.name}`, id])];
  }).join('');

/** The RESP file for the dataset (made once): every key Portico reads for a domain and its certificate. */
export function ensureRedisCommands(ds: Dataset): string {
  const file = path.join(ds.dir, 'redis.resp');
  if (existsSync(file)) return file;
  const pem = (name: string) => readFileSync(path.join(ds.certsDir, 'live', hostnameOf(0), name), 'utf8');
  const [certPem, keyPem] = [pem('cert.pem'), pem('key.pem')];
  const meta = JSON.parse(pem('meta.json')) as { notBefore: string; notAfter: string; issuer: string };
  const temp = `${file}.tmp`;
  const fd = openSync(temp, 'w');
  // the routing index's snapshot (redis-routes.ts) holds every route; nothing has changed since
  writeSync(fd, respBytes(['SET', 'portico:routes:snapshot'], indexOf(ds.count, ds.projects)));
  const opens = String(Math.floor(renewalOpens(meta.notBefore, meta.notAfter)));
  let chunk = resp(['SET', 'portico:routes:snapshot-seq', '0']) + resp(['HSET', 'portico:domain-counts', 'verified', String(ds.count)]);
  chunk += resp(['SET', `portico:account:${ACCOUNT}`, JSON.stringify({ id: ACCOUNT, plan: 'enterprise', limits: { perMinute: 100_000_000, perDay: 1_000_000_000 }, createdAt: CREATED })]);
  for (let i = 0; i < ds.count; i++) {
    const hostname = hostnameOf(i);
    const domain = domainOf(i, ds.projects);
    chunk += resp(['SET', `portico:domain:${hostname}`, JSON.stringify({ ...domain, certificate: { status: 'none' } })]);
    chunk += resp(['SET', `portico:domain-cert:${hostname}`, JSON.stringify({ status: 'issued', issuer: meta.issuer, notAfter: meta.notAfter })]);
    chunk += resp(['SADD', `portico:project:${domain.projectId}:domains`, hostname]);
    chunk += resp(['HSET', 'portico:domain-status', hostname, 'verified']);
    chunk += resp(['HSET', 'portico:routes', hostname, JSON.stringify({ projectId: domain.projectId })]);
    chunk += resp(['SET', `portico:cert:${hostname}`, JSON.stringify({ hostname, certPem, keyPem, ...meta })]);
    chunk += resp(['HSET', 'portico:cert-validity', hostname, JSON.stringify({ notBefore: meta.notBefore, notAfter: meta.notAfter })]);
    chunk += resp(['ZADD', 'portico:cert-renewal', opens, hostname]);
    chunk += resp(['ZADD', 'portico:cert-expiry', String(Date.parse(meta.notAfter)), hostname]);
    if (chunk.length > 1 << 20) {
      writeSync(fd, chunk);
      chunk = '';
    }
  }
  writeSync(fd, chunk);
  closeSync(fd);
  renameSync(temp, file);
  return file;
}

/** Loads the dataset into an empty Redis at `port` (not measured), projects pointing at today's origin. */
export async function loadRedis(ds: Dataset, port: number, originPort: number): Promise<void> {
  const file = ensureRedisCommands(ds);
  const pipe = (input: string | number) => new Promise<string>((resolve, reject) => {
    const child = spawn('redis-cli', ['-p', String(port), '--pipe'], { stdio: [typeof input === 'number' ? input : 'pipe', 'pipe', 'pipe'] });
    let text = '';
    child.stdout!.on('data', (d: Buffer) => { text += d; });
    child.stderr!.on('data', (d: Buffer) => { text += d; });
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 && /errors: 0,/.test(text) ? resolve(text) : reject(new Error(`redis-cli --pipe: ${text.slice(-500)}`))));
    if (typeof input === 'string') child.stdin!.end(input);
  });
  const fd = openSync(file, 'r');
  try {
    await pipe(fd);
  } finally {
    closeSync(fd);
  }
  await pipe(projectCommands(ds, `http://127.0.0.1:${originPort}`));
  // read back through Portico's own Redis stores
  const { connectRedis, openRedisCommands, openRedisStores } = await import('../../src/state/redis.ts');
  const { openRedisCertStores } = await import('../../src/certs/redis-store.ts');
  const connections = connectRedis(`redis://127.0.0.1:${port}`, 30_000);
  const stores = await openRedisStores(connections);
  try {
    const last = hostnameOf(ds.count - 1);
    const domain = await stores.domains.get(last);
    const route = await stores.domains.route(last);
    const certs = openRedisCertStores(openRedisCommands(connections), 'https://127.0.0.1:9/directory');
    const certificate = await certs.certificates.get(last);
    const { lt7d, lt30d, ge30d } = await certs.certificates.summary(Date.now());
    const { verified } = await stores.domains.countByStatus();
    const problems = [
      domain?.status !== 'verified' || domain.certificate?.status !== 'issued' ? `${last} reads back as ${JSON.stringify(domain)?.slice(0, 200)}` : '',
      route && stores.domains.indexedRoute(last)?.projectId === route.projectId ? '' : `no route for ${last}`,
      verified === ds.count ? '' : `${verified} verified domains counted instead of ${ds.count}`,
      certificate?.certPem.includes('BEGIN CERTIFICATE') ? '' : `no certificate for ${last}`,
      lt7d + lt30d + ge30d === ds.count ? '' : `${lt7d + lt30d + ge30d} certificates indexed by expiry instead of ${ds.count}`,
    ].filter(Boolean);
    if (problems.length) throw new Error(`the Redis dataset does not match Portico's formats (src/ changed?): ${problems.join('; ')}`);
  } finally {
    await stores.close();
  }
}

/** A fresh data dir for one start: the cached log plus one record per project naming today's origin,
 *  the domain index, and the cached per-domain files (linked: Portico only reads them here). */
export function prepareRun(ds: Dataset, dataDir: string, originPort: number): void {
  rmSync(dataDir, { recursive: true, force: true });
  mkdirSync(dataDir, { recursive: true });
  const log = path.join(dataDir, 'state.log');
  copyFileSync(ds.stateLog, log);
  copyFileSync(ds.domainIndex, path.join(dataDir, 'domains.index'));
  appendFileSync(log, ds.projects.map((id, p) => line({ op: 'put', t: 'projects', k: id, v: projectOf(id, p, `http://127.0.0.1:${originPort}`) })).join(''));
  symlinkSync(ds.domainsDir, path.join(dataDir, 'domains'));
}

// ---------------------------------------------------------------------------------------------

export interface StartSample {
  /** spawn → the `time` of the "Portico listening" line */
  listeningMs: number;
  /** spawn → the first handshake answered with a stored certificate (a client kept trying from the spawn on) */
  readyMs: number;
  /** spawn → the start of the first 0.5 s with (almost) no CPU: background start-up work done */
  settledMs: number;
  /** once settled */
  rssMiB: number;
  peakRssMiB: number;
  cpuSeconds: number;
}

const clientContext = tls.createSecureContext({});

/** One handshake attempt: the served certificate's CN, or null when nothing listens yet. */
function tryHandshake(port: number, servername: string): Promise<string | null> {
  return new Promise((resolve) => {
    const socket = tls.connect({ host: '127.0.0.1', port, servername, rejectUnauthorized: false, secureContext: clientContext });
    socket.once('secureConnect', () => {
      const cn = String(socket.getPeerCertificate().subject?.CN ?? '?');
      socket.destroy();
      resolve(cn);
    });
    socket.once('error', () => {
      socket.destroy();
      resolve(null);
    });
  });
}

function status(pid: number): { rss: number; hwm: number } {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+)`).exec(text)?.[1] ?? NaN);
    return { rss: kb('VmRSS') / 1024, hwm: kb('VmHWM') / 1024 };
  } catch {
    return { rss: NaN, hwm: NaN };
  }
}

/** Where the memory went, from Portico's own /metrics (prom-client's process and V8 gauges), MiB. */
export async function memoryBreakdown(adminPort: number): Promise<{ heapMiB: number; externalMiB: number } | null> {
  try {
    const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text();
    const gauge = (name: string) => Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? NaN) / 1048576;
    return { heapMiB: gauge('nodejs_heap_size_total_bytes'), externalMiB: gauge('nodejs_external_memory_bytes') };
  } catch {
    return null;
  }
}

export interface ScaleContext {
  tmp: string;
  cpus: string | null;
  clientCpus: string | null;
  originPort: number;
}

/** Starts Portico on the dataset, measures start-up, and leaves it running for the handshake runs. */
/** The reason Portico gave for not starting (its fatal log line), if any. */
function fatalLine(logFile: string): string | undefined {
  const text = existsSync(logFile) ? readFileSync(logFile, 'utf8') : '';
  for (const l of text.split('\n')) {
    try {
      const entry = JSON.parse(l) as { level?: number; msg?: string; err?: { message?: string } };
      if ((entry.level ?? 0) >= 60) return `${entry.msg}: ${entry.err?.message ?? ''}`;
    } catch {
      // not a JSON line
    }
  }
  return undefined;
}

/** `keepData`: an embedded run starts on the data dir the previous start left (else a fresh copy of the dataset) */
export async function startOnDataset(ds: Dataset, ctx: ScaleContext, n: number, probeIndex: number, opts: { redisUrl?: string; env?: Record<string, string>; keepData?: boolean } = {}): Promise<{ portico: Portico; sample: StartSample }> {
  const { redisUrl } = opts;
  const run = path.join(ctx.tmp, `scale-${ds.count}${redisUrl ? '-redis' : ''}`);
  const dataDir = path.join(run, 'data');
  let certsDir = ds.certsDir;
  if (redisUrl) {
    // state and certificates in Redis; the certs dir holds only the fallback certificate
    rmSync(run, { recursive: true, force: true });
    mkdirSync(dataDir, { recursive: true });
    certsDir = path.join(run, 'certs');
    mkdirSync(certsDir);
    for (const f of ['fallback.crt', 'fallback.key']) copyFileSync(path.join(ds.certsDir, f), path.join(certsDir, f));
  } else if (!opts.keepData) prepareRun(ds, dataDir, ctx.originPort);
  const ports = { https: await freePort(), http: await freePort(), admin: await freePort() };
  const logFile = path.join(run, `portico-${n}.log`);
  let ready = 0;
  let gone = false;
  const started = startPortico({
    dataDir,
    certsDir,
    redisUrl,
    logFile,
    cpus: ctx.cpus,
    ports,
    timeoutMs: 120_000,
    // never reach a real CA from the bench (every domain has a stored certificate; this is a guard);
    // the first DNS check of each domain, scheduled by the first start, spread over a year rather than a
    // day, so hardly any comes due during a run (no DNS queries measured, nothing written back into the
    // dataset's domain files, which runs share through a link)
    env: { PORTICO_ACME_DIRECTORY: 'https://127.0.0.1:9/directory', PORTICO_VERIFIED_RECHECK_MS: String(365 * 86_400_000), ...opts.env },
    onSpawn: (p) => { void p.exited.then(() => { gone = true; }); },
  });
  // from the spawn on, keep trying a handshake for a never-seen domain until a stored certificate answers
  const probe = (async () => {
    const deadline = Date.now() + 120_000;
    while (!gone && Date.now() < deadline) {
      const cn = await tryHandshake(ports.https, hostnameOf(probeIndex));
      if (cn === SCALE_CN) return Date.now();
      if (cn !== null) throw new Error(`a stored domain was answered with another certificate (CN ${cn})`);
      await sleep(5);
    }
    throw new Error(gone ? 'Portico exited' : 'no handshake with the stored certificate within 120 s');
  })();
  probe.catch(() => undefined); // read below; a start-up failure is reported first
  let portico: Portico;
  try {
    portico = await started;
  } catch (err) {
    throw new Error(`Portico did not start: ${fatalLine(logFile) ?? (err as Error).message.split('\n')[0]}`);
  }
  try {
    ready = await probe;
  } catch (err) {
    await stop(portico.process, 5000);
    throw new Error(`${(err as Error).message}${fatalLine(logFile) ? `: ${fatalLine(logFile)}` : ''}`);
  }
  // start-up work may go on in the background after the first handshake (the certificate sweep reads
  // every validity): RSS is read once the process has been idle (< 5 % CPU) for 0.5 s, at most 60 s on
  const pids = processTree(portico.process.pid);
  let cpu = cpuSeconds(pids);
  for (const until = Date.now() + 60_000; Date.now() < until; ) {
    await sleep(500);
    const now = cpuSeconds(pids);
    if (now - cpu < 0.025) break;
    cpu = now;
  }
  const settled = Date.now() - 500;
  const { rss, hwm } = status(portico.process.pid);
  const sample = { listeningMs: portico.listeningAt - portico.spawnedAt, readyMs: ready - portico.spawnedAt, settledMs: settled - portico.spawnedAt, rssMiB: rss, peakRssMiB: hwm, cpuSeconds: cpuSeconds(pids) };
  return { portico, sample };
}

export interface ClientResult {
  seconds: number;
  cold: { n: number; p50ms: number; p99ms: number; maxms: number; meanms: number };
  warm: { n: number; p50ms: number; p99ms: number; maxms: number; meanms: number };
  bulk: { n: number; p50ms: number; p99ms: number; maxms: number; meanms: number };
  /** probe mode: handshakes over 100 ms, seconds after the probe started */
  stalls: Array<{ at: number; ms: number }>;
  errors: number;
  wrongCertificate: number;
  lastError: string;
}

export async function runScaleClient(ctx: ScaleContext, options: { port: number; mode: 'alternate' | 'bulk' | 'probe'; from: number; count: number; warm?: string; concurrency?: number; seconds?: number; intervalMs?: number }): Promise<ClientResult> {
  const [cmd, argv] = wrap(ctx.clientCpus, process.execPath, [CLIENT, JSON.stringify({ ...options, prefix: PREFIX, suffix: SUFFIX, expectCN: SCALE_CN })]);
  const out = await output(cmd, argv, 'scale client');
  const found = out.split('\n').find((l) => l.startsWith('SCALE_JSON '));
  if (!found) throw new Error(`scale client printed no summary:\n${out}`);
  return JSON.parse(found.slice('SCALE_JSON '.length)) as ClientResult;
}

export { stop, status as procStatus };
