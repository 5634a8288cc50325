// Processes for the bench: spawning pinned to a core (taskset), CPU time and RSS from /proc, per-core
// busy time from /proc/stat, waiting for a listening port or a log line, and stopping by pid.
import { spawn, spawnSync, type ChildProcess, type StdioOptions } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import net from 'node:net';

export const onPath = (binary: string): boolean => spawnSync('sh', ['-c', `command -v ${binary}`], { stdio: 'ignore' }).status === 0;

export const CLK_TCK = (() => {
  const out = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
  const n = Number(out.stdout?.trim());
  return Number.isFinite(n) && n > 0 ? n : 100;
})();

/** Which cores the server under test and the load side (wrk, origin, Redis, clients) run on. */
export interface Pinning {
  server: string | null;
  client: string | null;
  note: string;
}

export function choosePinning(cores: number): Pinning {
  if (!onPath('taskset')) return { server: null, client: null, note: 'no taskset: nothing pinned' };
  if (cores < 2) return { server: null, client: null, note: `${cores} core: nothing pinned (server and load share it)` };
  const client = cores === 2 ? '1' : `1-${cores - 1}`;
  return { server: '0', client, note: `server under test on core 0; wrk, origin, Redis and clients on core${cores === 2 ? '' : 's'} ${client}` };
}

/**
 * The priority the bench's processes run at. On a shared machine other work lands on the measured
 * cores; as root the bench raises its own processes (servers, load generators) to nice -10 so that
 * work disturbs the ratios less. BENCH_NICE=0 turns it off.
 */
export const NICE = (() => {
  const wanted = Number(process.env.BENCH_NICE ?? (process.getuid?.() === 0 ? -10 : 0));
  return Number.isFinite(wanted) && onPath('nice') ? wanted : 0;
})();

/** `command args…` behind taskset (pinned to `cpus`) and nice; both exec, so the pid stays the command's. */
export function wrap(cpus: string | null, command: string, args: string[]): [string, string[]] {
  let argv = [command, ...args];
  if (NICE !== 0) argv = ['nice', '-n', String(NICE), ...argv];
  if (cpus) argv = ['taskset', '-c', cpus, ...argv];
  return [argv[0], argv.slice(1)];
}

export interface Spawned {
  name: string;
  child: ChildProcess;
  pid: number;
  exited: Promise<number | null>;
}

const running = new Set<Spawned>();

/** `command args…`, pinned to `cpus` when given (taskset execs, so the pid is the command's own). */
/** Runs a command to its end; its stdout and stderr together, or an error with them when it fails. */
export function output(command: string, args: string[], name: string, env?: NodeJS.ProcessEnv): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env: env ?? process.env });
    let text = '';
    child.stdout!.on('data', (d: Buffer) => { text += d; });
    child.stderr!.on('data', (d: Buffer) => { text += d; });
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(text) : reject(new Error(`${name} exited with ${code}:\n${text}`))));
  });
}

export function spawnPinned(name: string, cpus: string | null, command: string, args: string[], options: { env?: NodeJS.ProcessEnv; stdio?: StdioOptions; cwd?: string } = {}): Spawned {
  const [cmd, argv] = wrap(cpus, command, args);
  const child = spawn(cmd, argv, { env: options.env ?? process.env, stdio: options.stdio ?? 'ignore', cwd: options.cwd });
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', (code, signal) => resolve(code ?? (signal ? -1 : null)));
    child.once('error', () => resolve(-1));
  });
  const spawned: Spawned = { name, child, pid: child.pid ?? -1, exited };
  running.add(spawned);
  exited.then(() => running.delete(spawned));
  return spawned;
}

/** SIGTERM, then SIGKILL after `graceMs`; only the processes this bench started. */
export async function stop(p: Spawned | null | undefined, graceMs = 5000): Promise<void> {
  if (!p || p.child.exitCode !== null || p.child.signalCode !== null) return;
  p.child.kill('SIGTERM');
  const timer = setTimeout(() => p.child.kill('SIGKILL'), graceMs);
  await p.exited;
  clearTimeout(timer);
}

export async function stopAll(): Promise<void> {
  await Promise.all([...running].map((p) => stop(p, 3000)));
}

/** `pid` and its descendants (nginx: master + worker). */
export function processTree(root: number): number[] {
  const parents = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      parents.set(Number(entry), Number(rest[1]));
    } catch {
      // gone meanwhile
    }
  }
  const tree = [root];
  for (let i = 0; i < tree.length; i++) for (const [pid, ppid] of parents) if (ppid === tree[i]) tree.push(pid);
  return tree;
}

/** user + system CPU seconds of these processes (all their threads). */
export function cpuSeconds(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(rest[11]) + Number(rest[12]);
    } catch {
      // exited
    }
  }
  return ticks / CLK_TCK;
}

export function rssMiB(pids: number[]): number {
  let kb = 0;
  for (const pid of pids) {
    try {
      const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (m) kb += Number(m[1]);
    } catch {
      // exited
    }
  }
  return kb / 1024;
}

/** busy and total seconds per core since boot (busy = everything but idle and iowait; steal counts as busy) */
export function coreTimes(): Map<number, { busy: number; total: number }> {
  const out = new Map<number, { busy: number; total: number }>();
  if (!existsSync('/proc/stat')) return out;
  for (const line of readFileSync('/proc/stat', 'utf8').split('\n')) {
    const m = /^cpu(\d+)\s+(.*)$/.exec(line);
    if (!m) continue;
    const f = m[2].trim().split(/\s+/).map(Number);
    const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
    out.set(Number(m[1]), { busy: (total - f[3] - f[4]) / CLK_TCK, total: total / CLK_TCK });
  }
  return out;
}

export async function waitForPort(port: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.once('connect', () => { socket.destroy(); resolve(true); });
      socket.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`nothing listened on 127.0.0.1:${port} within ${timeoutMs} ms`);
    await sleep(25);
  }
}

/** Polls a file until a line satisfies `match`; returns what `match` returned. */
export async function waitForLine<T>(file: string, match: (line: string) => T | undefined, timeoutMs: number, exited?: Promise<unknown>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let gone = false;
  exited?.then(() => { gone = true; });
  for (;;) {
    const text = existsSync(file) ? readFileSync(file, 'utf8') : '';
    for (const line of text.split('\n')) {
      const found = match(line);
      if (found !== undefined) return found;
    }
    if (gone || Date.now() > deadline) throw new Error(`${gone ? 'process exited' : 'timed out'} before the expected line in ${file}:\n${text.slice(-2000)}`);
    await sleep(50);
  }
}

/** `{"port":N}` printed on a child's stdout (origin, bare server). */
export function portFromStdout(p: Spawned, timeoutMs = 10_000): Promise<number> {
  return new Promise((resolve, reject) => {
    let text = '';
    const timer = setTimeout(() => reject(new Error(`${p.name} did not print its port`)), timeoutMs);
    p.child.stdout!.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      const m = /"port":(\d+)/.exec(text);
      if (m) {
        clearTimeout(timer);
        p.child.stdout!.resume();
        resolve(Number(m[1]));
      }
    });
    p.exited.then((code) => { clearTimeout(timer); reject(new Error(`${p.name} exited with ${code}`)); });
  });
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
