// Portico as the bench runs it: `portico serve` as its own process, pinned, on port 0, with the
// access log on (stdout to a file, so writing it costs what it costs in production), then an
// enterprise account, a key and the `bench` project made through the admin API.
import { closeSync, openSync, readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { existsSync } from 'node:fs';
import { spawnPinned, waitForLine, type Spawned } from './proc.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
export const ADMIN_TOKEN = 'bench-admin-token-0123456789abcdef';

export interface Portico {
  process: Spawned;
  https: number;
  http: number;
  admin: number;
  logFile: string;
  certFile: string;
  keyFile: string;
  entry: string;
  /** Date.now() just before the spawn, and the `time` of the "Portico listening" log line */
  spawnedAt: number;
  listeningAt: number;
}

/** What `npm start` runs: the build in dist/ (bench/run.ts builds it first); BENCH_SRC=1 runs the sources. */
export function porticoEntry(): string {
  const dist = path.join(ROOT, 'dist/cli/main.js');
  return process.env.BENCH_SRC !== '1' && existsSync(dist) ? dist : path.join(ROOT, 'src/cli/main.ts');
}

/** The Node flags `npm start` gives Portico (package.json), so the bench runs what users run. */
export function startFlags(): string[] {
  const start = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start;
  return start.split(/\s+/).filter((word) => word.startsWith('--'));
}

/** Brings dist/ up to date with src/ (tsc, a few seconds) unless BENCH_SRC=1. */
export function buildDist(): void {
  if (process.env.BENCH_SRC === '1') return;
  const result = spawnSync(process.execPath, [path.join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', path.join(ROOT, 'tsconfig.build.json')], { stdio: 'inherit', cwd: ROOT });
  if (result.status !== 0) throw new Error('the build failed (tsc -p tsconfig.build.json); fix it or run with BENCH_SRC=1');
}

export async function startPortico(opts: { dataDir: string; certsDir: string; logFile: string; cpus: string | null; redisUrl?: string; nodeArgs?: string[]; env?: Record<string, string>; ports?: { https: number; http: number; admin: number }; timeoutMs?: number; onSpawn?: (p: Spawned) => void; entry?: string; serveArgs?: string[]; wrapper?: string[] }): Promise<Portico> {
  const entry = opts.entry ?? porticoEntry();
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PORTICO_CONFIG: path.join(ROOT, 'config/portico.yaml'),
    PORTICO_HTTP_PORT: String(opts.ports?.http ?? 0),
    PORTICO_HTTPS_PORT: String(opts.ports?.https ?? 0),
    PORTICO_ADMIN_PORT: String(opts.ports?.admin ?? 0),
    PORTICO_DATA_DIR: opts.dataDir,
    PORTICO_CERTS_DIR: opts.certsDir,
    PORTICO_ADMIN_TOKEN: ADMIN_TOKEN,
    PORTICO_LOG_LEVEL: 'info',
    ...opts.env,
  };
  if (opts.redisUrl) env.PORTICO_REDIS_URL = opts.redisUrl;
  else delete env.PORTICO_REDIS_URL;
  const fd = openSync(opts.logFile, 'a');
  const spawnedAt = Date.now();
  // `wrapper`: a command Node runs under (valgrind for the instructions scenario)
  const [command, ...args] = [...(opts.wrapper ?? []), process.execPath, ...startFlags(), ...(opts.nodeArgs ?? []), entry, 'serve', ...(opts.serveArgs ?? [])];
  const p = spawnPinned('portico', opts.cpus, command, args, { env, stdio: ['ignore', fd, fd], cwd: ROOT });
  closeSync(fd);
  opts.onSpawn?.(p);
  const { time: listeningAt, ...ports } = await waitForLine(opts.logFile, (line) => {
    if (!line.includes('Portico listening')) return undefined;
    const entry = JSON.parse(line) as { https: number; http: number; admin: number; time: number };
    return { https: entry.https, http: entry.http, admin: entry.admin, time: entry.time };
  }, opts.timeoutMs ?? 20_000, p.exited);
  return { process: p, ...ports, logFile: opts.logFile, certFile: path.join(opts.certsDir, 'fallback.crt'), keyFile: path.join(opts.certsDir, 'fallback.key'), entry, spawnedAt, listeningAt };
}

export async function admin<T>(portico: Portico, method: string, route: string, body?: unknown): Promise<T> {
  const res = await fetch(`http://127.0.0.1:${portico.admin}${route}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`admin ${method} ${route} → ${res.status}: ${text}`);
  return JSON.parse(text) as T;
}

/** An enterprise account with limits the bench cannot reach, its key, and the `bench` project. */
export async function provision(portico: Portico, originPort: number): Promise<{ key: string; accountId: string }> {
  const account = await admin<{ id: string }>(portico, 'POST', '/admin/accounts', { plan: 'enterprise', limits: { perMinute: 100_000_000, perDay: 1_000_000_000 } });
  const key = await admin<{ key: string }>(portico, 'POST', '/admin/keys', { accountId: account.id });
  await admin(portico, 'POST', '/admin/projects', { accountId: account.id, name: 'bench', upstream: `http://127.0.0.1:${originPort}` });
  return { key: key.key, accountId: account.id };
}
