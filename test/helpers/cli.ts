// Runs the `portico` CLI as a real child process: no PORTICO_* of the test runner leaks in, an empty
// working directory (a ./data/admin-token of the checkout is never picked up), and a compile cache
// shared by the runs so each start costs less.
import { execFile, spawn, type StdioOptions } from 'node:child_process';
import path from 'node:path';
import { tempDir, cleanup } from './portico.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
export const CLI = path.join(ROOT, 'src/cli/main.ts');

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

export type Cli = ((args: string[], env?: Record<string, string | undefined>, options?: { stdout?: number }) => Promise<Run>) & { cwd: string; close(): void };

/** A runner with `base` variables (PORTICO_ADMIN_URL, PORTICO_ADMIN_TOKEN …); `undefined` removes one. */
export function cliRunner(base: Record<string, string>, timeoutMs = 15_000): Cli {
  const cwd = tempDir('cli-cwd');
  const compileCache = tempDir('cli-compile-cache');
  const cleanEnv = {
    ...Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('PORTICO_'))),
    NODE_COMPILE_CACHE: compileCache,
    ...base,
  } as Record<string, string>;
  const run = (args: string[], env: Record<string, string | undefined> = {}, options: { stdout?: number } = {}): Promise<Run> => {
    const full: Record<string, string> = { ...cleanEnv };
    for (const [name, value] of Object.entries(env)) {
      if (value === undefined) delete full[name];
      else full[name] = value;
    }
    const started = Date.now();
    if (options.stdout !== undefined) return runWithStdout(args, full, cwd, options.stdout, timeoutMs, started);
    // asynchronous: the admin listener may live in the test's own process, so never spawnSync
    return new Promise((resolve) => {
      execFile(process.execPath, [CLI, ...args], { env: full, cwd, timeout: timeoutMs }, (err, stdout, stderr) => {
        const code = err ? ((err as { code?: unknown }).code as number | null) : 0;
        resolve({ code: typeof code === 'number' ? code : null, stdout, stderr, ms: Date.now() - started });
      });
    });
  };
  return Object.assign(run, { cwd, close: () => cleanup(cwd, compileCache) });
}

/** With stdout on a given file descriptor (e.g. /dev/full). */
function runWithStdout(args: string[], env: Record<string, string>, cwd: string, fd: number, timeoutMs: number, started: number): Promise<Run> {
  return new Promise((resolve) => {
    const stdio: StdioOptions = ['ignore', fd, 'pipe'];
    const child = spawn(process.execPath, [CLI, ...args], { env, cwd, stdio, timeout: timeoutMs });
    let stderr = '';
    child.stderr!.on('data', (chunk) => (stderr += chunk));
    child.on('close', (code) => resolve({ code, stdout: '', stderr, ms: Date.now() - started }));
  });
}
