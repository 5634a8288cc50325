// The 100k-domain scenario (DESIGN §8–§9, issue 7): a data dir and a certs dir written straight to
// disk in Portico's own formats, then Portico (embedded state) started on them and measured from
// outside — start-up time, RSS, and the first handshake for a domain whose certificate is read from
// storage, against a domain whose SecureContext is cached.
//
// Formats written here (keep in step with src/):
// - src/state/append-log.ts: `<crc32 hex, 8> <json>\n` per record; src/state/embedded.ts: records
//   {op:'put', t, k, v} in tables 'accounts', 'projects', 'domains' (src/state/types.ts Domain, status
//   'verified'), 'domainCertificates' (CertificateState);
// - src/certs/file-store.ts: `<certs>/live/<hostname>/{cert.pem,key.pem,meta.json}`.
// One real self-signed ECDSA P-256 certificate and key serve every hostname (its SAN does not name
// them; the handshake does not care, and making 100k keys would take minutes). Generating is not
// measured; the result is cached under bench/results/scale-cache/ and reused.
import { spawn } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { appendFileSync, copyFileSync, existsSync, mkdirSync, openSync, closeSync, readFileSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import tls from 'node:tls';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import { ensureFallbackCertificate, selfSigned } from '../../src/certs/fallback.ts';
import { freePort } from '../../test/helpers/free-port.ts';
import { cpuSeconds, processTree, sleep, stop, wrap } from './proc.ts';
import { startPortico, type Portico } from './portico.ts';

/** bump when the generated layout changes: older caches are then made again */
const FORMAT = 1;
export const SCALE_CN = 'portico-bench-scale';
const PREFIX = 'www.site-';
const SUFFIX = '.example';
const DOMAINS_PER_PROJECT = 1000;
const CLIENT = path.join(import.meta.dirname, '..', 'scale-client.ts');
// the fallback certificate Portico would make on first start (config/portico.yaml's API hosts)
const FALLBACK_NAMES = ['api.localhost', 'localhost', '127.0.0.1', 'api.staging.localhost'];

export const hostnameOf = (i: number) => `${PREFIX}${String(i).padStart(6, '0')}${SUFFIX}`;

export interface Dataset {
  count: number;
  dir: string;
  stateLog: string;
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

export async function ensureDataset(cacheRoot: string, count: number): Promise<Dataset> {
  const dir = path.join(cacheRoot, `v${FORMAT}-n${count}`);
  const stateLog = path.join(dir, 'state.log');
  const certsDir = path.join(dir, 'certs');
  const marker = path.join(dir, 'complete.json');
  const projectCount = Math.max(1, Math.ceil(count / DOMAINS_PER_PROJECT));
  const projects = Array.from({ length: projectCount }, (_, p) => `prj_scale${String(p).padStart(4, '0')}`);
  const sizeOf = () => readFileSync(stateLog).length / 1048576;
  if (existsSync(marker)) return { count, dir, stateLog, certsDir, projects, generatedSeconds: null, stateLogMiB: sizeOf() };

  const t0 = performance.now();
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(path.join(certsDir, 'live'), { recursive: true, mode: 0o700 });
  await ensureFallbackCertificate(certsDir, FALLBACK_NAMES);
  const pair = await selfSigned([SCALE_CN], 3650);
  const leaf = new X509Certificate(pair.cert);
  const notBefore = new Date(leaf.validFrom).toISOString();
  const notAfter = new Date(leaf.validTo).toISOString();
  const meta = JSON.stringify({ notBefore, notAfter, issuer: SCALE_CN });
  const created = '2026-01-01T00:00:00.000Z';

  // the state log: one account, a project per 1,000 domains, each domain verified with an issued certificate
  const fd = openSync(stateLog, 'w');
  const accountId = 'acc_scale';
  let chunk = line({ op: 'put', t: 'accounts', k: accountId, v: { id: accountId, plan: 'enterprise', limits: { perMinute: 100_000_000, perDay: 1_000_000_000 }, createdAt: created } });
  for (const [p, id] of projects.entries()) {
    // the upstream is set for each run (the origin's port changes): see prepareRun()
    chunk += line({ op: 'put', t: 'projects', k: id, v: { id, accountId, name: `scale-${p}`, upstream: 'http://127.0.0.1:9', createdAt: created } });
  }
  for (let i = 0; i < count; i++) {
    const hostname = hostnameOf(i);
    const projectId = projects[Math.floor(i / DOMAINS_PER_PROJECT)];
    const domain = {
      hostname,
      projectId,
      accountId,
      primary: i % DOMAINS_PER_PROJECT === 0,
      status: 'verified',
      apex: false,
      records: [{ type: 'CNAME', name: 'www', value: 'edge.localhost', ttl: 3600 }],
      diagnostics: [],
      certificate: { status: 'none' },
      createdAt: created,
      verifiedAt: created,
    };
    chunk += line({ op: 'put', t: 'domains', k: hostname, v: domain });
    chunk += line({ op: 'put', t: 'domainCertificates', k: hostname, v: { status: 'issued', issuer: SCALE_CN, notAfter } });
    if (chunk.length > 1 << 20) {
      writeSync(fd, chunk);
      chunk = '';
    }
  }
  writeSync(fd, chunk);
  closeSync(fd);

  // the certificates, as file-store.ts writes them
  for (let i = 0; i < count; i++) {
    const dirOf = path.join(certsDir, 'live', hostnameOf(i));
    mkdirSync(dirOf, { mode: 0o700 });
    writeFileSync(path.join(dirOf, 'key.pem'), pair.key, { mode: 0o600 });
    writeFileSync(path.join(dirOf, 'cert.pem'), pair.cert, { mode: 0o644 });
    writeFileSync(path.join(dirOf, 'meta.json'), meta, { mode: 0o644 });
  }
  const generatedSeconds = (performance.now() - t0) / 1000;
  writeFileSync(marker, JSON.stringify({ format: FORMAT, count, projects: projects.length, generatedSeconds, at: new Date().toISOString() }));
  return { count, dir, stateLog, certsDir, projects, generatedSeconds, stateLogMiB: sizeOf() };
}

// --- Redis mode: the same domains and certificates as Redis keys (src/state/redis.ts,
// src/state/redis-domains.ts, src/certs/redis-store.ts), loaded with `redis-cli --pipe` from a RESP
// file kept next to the dataset

const resp = (args: string[]) => `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;

const projectCommands = (ds: Dataset, upstream: string) =>
  ds.projects.flatMap((id, p) => {
    const project = { id, accountId: 'acc_scale', name: `scale-${p}`, upstream, createdAt: '2026-01-01T00:00:00.000Z' };
    return [resp(['SET', `portico:project:${id}`, JSON.stringify(project)]), resp(['SADD', 'portico:projects', id]), resp(['SET', `portico:project-name:${project.name}`, id])];
  }).join('');

/** The RESP file for the dataset (made once): every key Portico reads for a domain and its certificate. */
export function ensureRedisCommands(ds: Dataset): string {
  const file = path.join(ds.dir, 'redis.resp');
  if (existsSync(file)) return file;
  const pem = (name: string) => readFileSync(path.join(ds.certsDir, 'live', hostnameOf(0), name), 'utf8');
  const [certPem, keyPem] = [pem('cert.pem'), pem('key.pem')];
  const meta = JSON.parse(pem('meta.json')) as { notBefore: string; notAfter: string; issuer: string };
  const created = '2026-01-01T00:00:00.000Z';
  const temp = `${file}.tmp`;
  const fd = openSync(temp, 'w');
  let chunk = resp(['SET', 'portico:account:acc_scale', JSON.stringify({ id: 'acc_scale', plan: 'enterprise', limits: { perMinute: 100_000_000, perDay: 1_000_000_000 }, createdAt: created })]);
  for (let i = 0; i < ds.count; i++) {
    const hostname = hostnameOf(i);
    const projectId = ds.projects[Math.floor(i / DOMAINS_PER_PROJECT)];
    const domain = { hostname, projectId, accountId: 'acc_scale', primary: i % DOMAINS_PER_PROJECT === 0, status: 'verified', apex: false, records: [{ type: 'CNAME', name: 'www', value: 'edge.localhost', ttl: 3600 }], diagnostics: [], certificate: { status: 'none' }, createdAt: created, verifiedAt: created };
    chunk += resp(['SET', `portico:domain:${hostname}`, JSON.stringify(domain)]);
    chunk += resp(['SET', `portico:domain-cert:${hostname}`, JSON.stringify({ status: 'issued', issuer: meta.issuer, notAfter: meta.notAfter })]);
    chunk += resp(['SADD', `portico:project:${projectId}:domains`, hostname]);
    chunk += resp(['HSET', 'portico:domain-status', hostname, 'verified']);
    chunk += resp(['HSET', 'portico:routes', hostname, JSON.stringify({ projectId })]);
    chunk += resp(['SET', `portico:cert:${hostname}`, JSON.stringify({ hostname, certPem, keyPem, ...meta })]);
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
}

/** A fresh data dir for one start: the cached log plus one record per project naming today's origin. */
export function prepareRun(ds: Dataset, dataDir: string, originPort: number): void {
  rmSync(dataDir, { recursive: true, force: true });
  mkdirSync(dataDir, { recursive: true });
  const log = path.join(dataDir, 'state.log');
  copyFileSync(ds.stateLog, log);
  appendFileSync(log, ds.projects.map((id, p) => line({ op: 'put', t: 'projects', k: id, v: { id, accountId: 'acc_scale', name: `scale-${p}`, upstream: `http://127.0.0.1:${originPort}`, createdAt: '2026-01-01T00:00:00.000Z' } })).join(''));
}

// ---------------------------------------------------------------------------------------------

export interface StartSample {
  /** spawn → the `time` of the "Portico listening" line */
  listeningMs: number;
  /** spawn → the first handshake answered with a stored certificate (a client kept trying from the spawn on) */
  readyMs: number;
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

export interface ScaleContext {
  tmp: string;
  cpus: string | null;
  clientCpus: string | null;
  originPort: number;
}

/** Starts Portico on the dataset, measures start-up, and leaves it running for the handshake runs. */
export async function startOnDataset(ds: Dataset, ctx: ScaleContext, n: number, probeIndex: number, redisUrl?: string): Promise<{ portico: Portico; sample: StartSample }> {
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
  } else prepareRun(ds, dataDir, ctx.originPort);
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
    // never reach a real CA from the bench (every domain has a stored certificate; this is a guard)
    env: { PORTICO_ACME_DIRECTORY: 'https://127.0.0.1:9/directory' },
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
    throw new Error('no handshake with the stored certificate within 120 s');
  })();
  const portico = await started;
  ready = await probe;
  await sleep(1000);
  const pids = processTree(portico.process.pid);
  const { rss, hwm } = status(portico.process.pid);
  const sample = { listeningMs: portico.listeningAt - portico.spawnedAt, readyMs: ready - portico.spawnedAt, rssMiB: rss, peakRssMiB: hwm, cpuSeconds: cpuSeconds(pids) };
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
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    child.stdout.on('data', (d: Buffer) => { text += d; });
    child.stderr.on('data', (d: Buffer) => { text += d; });
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(text) : reject(new Error(`scale client exited with ${code}:\n${text}`))));
  });
  const found = out.split('\n').find((l) => l.startsWith('SCALE_JSON '));
  if (!found) throw new Error(`scale client printed no summary:\n${out}`);
  return JSON.parse(found.slice('SCALE_JSON '.length)) as ClientResult;
}

export { stop, status as procStatus };
