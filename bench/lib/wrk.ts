// wrk runs and how they reach `bench.localhost` / `api.localhost` / `cluster.localhost` with the right SNI.
// wrk has no SNI flag: it sends the URL's host as SNI, so the name must resolve. Three ways, first
// that works: the system resolves it; or (root) a private mount namespace for wrk alone in which a
// bench hosts file is bind-mounted over /etc/hosts (the real /etc/hosts is never touched); or the
// URL names 127.0.0.1 and `Host:` carries the name (SNI is then the IP literal, which Portico accepts
// without its Host/SNI check — the route code is the same, the SNI callback sees an IP).
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { output, wrap } from './proc.ts';

const LUA = path.join(import.meta.dirname, '..', 'wrk-report.lua');
export const NAMES = ['bench.localhost', 'api.localhost', 'cluster.localhost'];

export interface Resolution {
  mode: 'system' | 'namespace' | 'ip';
  note: string;
  hostsFile?: string;
}

export function chooseResolution(tmp: string): Resolution {
  const resolves = (name: string) => /^127\.0\.0\.1\s/m.test(spawnSync('getent', ['ahostsv4', name], { encoding: 'utf8' }).stdout ?? '');
  if (NAMES.every(resolves)) return { mode: 'system', note: `${NAMES.join('/')} resolve to 127.0.0.1: wrk sends the real SNI` };
  const hostsFile = path.join(tmp, 'hosts');
  writeFileSync(hostsFile, `127.0.0.1 localhost ${NAMES.join(' ')}\n::1 localhost\n`);
  if (process.getuid?.() === 0) {
    const probe = spawnSync('unshare', ['-m', 'sh', '-c', 'mount --bind "$0" /etc/hosts && getent ahostsv4 bench.localhost', hostsFile], { encoding: 'utf8' });
    if (probe.status === 0 && /^127\.0\.0\.1\s/m.test(probe.stdout)) {
      return { mode: 'namespace', hostsFile, note: '*.localhost does not resolve here: wrk runs in a private mount namespace with a bench hosts file bind-mounted over /etc/hosts (real SNI; /etc/hosts untouched)' };
    }
  }
  return { mode: 'ip', note: '*.localhost does not resolve and no mount namespace: wrk connects to 127.0.0.1 with a Host header (SNI is the IP literal)' };
}

export interface LoadResult {
  requests: number;
  seconds: number;
  rps: number;
  p50ms: number;
  p99ms: number;
  errors: number;
  errorDetail: string;
  info?: string;
}

export interface WrkRun {
  scheme: 'http' | 'https';
  hostname: string;
  port: number;
  path: string;
  headers?: Record<string, string>;
  connections: number;
  threads?: number;
  seconds: number;
  cpus: string | null;
  resolution: Resolution;
  /** each connection waits this long between an answer and its next request (paced load) */
  paceMs?: number;
}

export async function runWrk(run: WrkRun): Promise<LoadResult> {
  const byIp = run.scheme === 'http' || run.resolution.mode === 'ip' || !NAMES.includes(run.hostname);
  const url = `${run.scheme}://${byIp ? '127.0.0.1' : run.hostname}:${run.port}${run.path}`;
  // wrk adds its own `Host` unless one spelled exactly `Host` is given (a `host:` would make two)
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(run.headers ?? {})) headers[name.toLowerCase() === 'host' ? 'Host' : name] = value;
  if (byIp && NAMES.includes(run.hostname)) headers.Host ??= run.hostname;
  const args = ['-t', String(run.threads ?? 1), '-c', String(run.connections), '-d', `${run.seconds}s`, '--timeout', '5s', '-s', LUA];
  for (const [name, value] of Object.entries(headers)) args.push('-H', `${name}: ${value}`);
  args.push(url);
  const wrk = wrap(run.cpus, 'wrk', args).flat();
  const [cmd, argv] = !byIp && run.resolution.mode === 'namespace'
    ? ['unshare', ['-m', 'sh', '-c', 'mount --bind "$0" /etc/hosts && exec "$@"', run.resolution.hostsFile!, ...wrk]]
    : [wrk[0], wrk.slice(1)];
  const out = await output(cmd, argv, 'wrk', run.paceMs ? { ...process.env, WRK_PACE_MS: String(run.paceMs) } : undefined);
  const line = out.split('\n').find((l) => l.startsWith('WRK_JSON '));
  if (!line) throw new Error(`wrk printed no summary:\n${out}`);
  const r = JSON.parse(line.slice('WRK_JSON '.length));
  const seconds = r.duration_us / 1e6;
  const parts = (['connect', 'read', 'write', 'timeout', 'status'] as const).filter((k) => r[k] > 0).map((k) => `${k === 'status' ? 'non-2xx/3xx' : k} ${r[k]}`);
  return {
    requests: r.requests,
    seconds,
    rps: r.requests / seconds,
    p50ms: r.p50_us / 1000,
    p99ms: r.p99_us / 1000,
    errors: r.connect + r.read + r.write + r.timeout + r.status,
    errorDetail: parts.join(', '),
  };
}
