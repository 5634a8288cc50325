// Starts Portico for a test: in this process (serve()) or as a real child process (for kill -9),
// always on port 0 with its own data and certs dirs, and a captured log.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { createInterface } from 'node:readline';
import { loadConfig } from '../../src/config.ts';
import { createLogger } from '../../src/log.ts';
import { serve, type Running } from '../../src/main.ts';

export const ADMIN_TOKEN = 'test-admin-token-0123456789';
const ROOT = path.resolve(import.meta.dirname, '../..');

export interface Ports {
  https: number;
  http: number;
  admin: number;
  metrics: number | null;
}

export interface Instance {
  ports: Ports;
  /** PEM of the fallback certificate, to trust in clients */
  ca: string;
  dataDir: string;
  certsDir: string;
  logs: string[];
  env: Record<string, string>;
  running: Running;
  stop(): Promise<void>;
}

// every folder made here goes when the test file's process ends, also when a test that restarts on
// the same folder (so cannot remove it at stop) or one that failed half-way did not remove it itself
const made = new Set<string>();
process.once('exit', () => cleanup(...made));

export function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), `portico-${prefix}-`));
  made.add(dir);
  return dir;
}

/** The PORTICO_* variables of a test instance (ports 0, the test token, no real CA), `env` on top. */
export function baseEnv(env: Record<string, string>): Record<string, string> {
  const dataDir = env.PORTICO_DATA_DIR ?? tempDir('data');
  const certsDir = env.PORTICO_CERTS_DIR ?? tempDir('certs');
  return {
    PORTICO_CONFIG: path.join(ROOT, 'config/portico.yaml'),
    PORTICO_HTTP_PORT: '0',
    PORTICO_HTTPS_PORT: '0',
    PORTICO_ADMIN_PORT: '0',
    PORTICO_ADMIN_TOKEN: ADMIN_TOKEN,
    PORTICO_LOG_LEVEL: 'info',
    // two test files run at once on two cores: a loaded machine must not pass for a Redis outage
    PORTICO_REDIS_COMMAND_TIMEOUT_MS: '1000',
    // no test orders from the internet: a CA that refuses at once unless a test brings pebble
    PORTICO_ACME_DIRECTORY: 'https://127.0.0.1:9/directory',
    ...env,
    PORTICO_DATA_DIR: dataDir,
    PORTICO_CERTS_DIR: certsDir,
  };
}

/** Portico in this process. */
export async function startPortico(env: Record<string, string> = {}): Promise<Instance> {
  const full = baseEnv(env);
  const config = loadConfig(full, ROOT);
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      logs.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  const running = await serve(config, createLogger(config.log.level, sink), { ...process.env, ...full });
  return {
    ports: running.listeners.ports(),
    ca: readFileSync(path.join(config.certsDir, 'fallback.crt'), 'utf8'),
    dataDir: config.dataDir,
    certsDir: config.certsDir,
    logs,
    env: full,
    running,
    stop: () => running.stop(),
  };
}

export interface Child {
  process: ChildProcess;
  ports: Ports;
  ca: string;
  env: Record<string, string>;
  logs: string[];
  exited: Promise<number | null>;
  kill(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Portico as a real process (`portico serve`, then `args`), ready once it logs its ports. */
export async function spawnPortico(env: Record<string, string> = {}, args: string[] = []): Promise<Child> {
  const full = baseEnv(env);
  const child = spawn(process.execPath, [path.join(ROOT, 'src/cli/main.ts'), 'serve', ...args], {
    env: { ...process.env, ...full },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: string[] = [];
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const ports = await new Promise<Ports>((resolve, reject) => {
    // a start takes ~1 s; 15 s ran out twice for a process that had logged nothing yet, on a machine at
    // load ~13 (three test files at a time beside other runs)
    const timer = setTimeout(() => reject(new Error(`portico did not start within 30 s:\n${logs.join('\n')}`)), 30_000);
    createInterface({ input: child.stdout! }).on('line', (line) => {
      logs.push(line);
      try {
        const entry = JSON.parse(line);
        if (typeof entry.msg === 'string' && entry.msg.startsWith('Portico listening')) {
          clearTimeout(timer);
          resolve({ https: entry.https, http: entry.http, admin: entry.admin, metrics: entry.metrics });
        }
      } catch {
        // not JSON: keep it for the error message
      }
    });
    createInterface({ input: child.stderr! }).on('line', (line) => logs.push(line));
    exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`portico exited with ${code} before listening:\n${logs.join('\n')}`));
    });
  });
  return {
    process: child,
    ports,
    ca: readFileSync(path.join(full.PORTICO_CERTS_DIR, 'fallback.crt'), 'utf8'),
    env: full,
    logs,
    exited,
    async kill(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

/** SIGKILLs every process named (a primary's workers that may outlive it); those gone already are skipped. */
export function killAll(pids: Iterable<number>): void {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
}

/** whether a process of this pid is running (signal 0 checks without sending anything) */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export function cleanup(...dirs: string[]): void {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
}
