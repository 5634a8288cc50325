// Instruction counts under callgrind (valgrind): a server started behind `prefix()`, its counters
// zeroed before a measured load and dumped after it. A count of instructions is the same from run to
// run within a few per cent, where CPU-seconds on this kind of machine swing ±10–15 % between two
// runs of the same build; it leaves out what the kernel does (syscalls, the network) and what memory
// stalls cost, so it says what the JavaScript and native code of the process do, not the whole CPU.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { onPath, output } from './proc.ts';

export const callgrindInstalled = (): boolean => onPath('valgrind') && onPath('callgrind_control');

/** The command prefix for a process to count: one output file per thread and dump, in `dir` */
export function prefix(dir: string, name: string): string[] {
  // --smc-check: V8 writes and then runs its own machine code (JIT) in anonymous memory
  // valgrind's own messages go to a file of their own, out of the bench's output and the dump names
  return ['valgrind', '--tool=callgrind', '--separate-threads=yes', '--smc-check=all-non-file', `--callgrind-out-file=${path.join(dir, `${name}.%p`)}`, `--log-file=${path.join(dir, `valgrind-${name}.%p.log`)}`];
}

export interface Counts {
  /** every thread: the event loop, V8's compiler and GC helpers, libuv's pool */
  total: number;
  /** the event loop's thread */
  mainThread: number;
}

/**
 * Counts the instructions `pid` runs during `load()`: zeroes its counters, runs the load, dumps them,
 * and sums the dump's per-thread files (thread 01 is the main thread).
 */
export async function count(dir: string, name: string, pid: number, load: () => Promise<void>): Promise<Counts> {
  await output('callgrind_control', ['-z', String(pid)], 'callgrind_control -z');
  await load();
  const before = new Set(readdirSync(dir));
  await output('callgrind_control', ['-d', String(pid)], 'callgrind_control -d');
  const stem = `${name}.${pid}.`;
  const files = readdirSync(dir).filter((f) => f.startsWith(stem) && !before.has(f));
  if (files.length === 0) throw new Error(`callgrind wrote no dump for ${name} (pid ${pid}) in ${dir}`);
  let total = 0;
  let mainThread = 0;
  for (const file of files) {
    const m = /^summary: (\d+)$/m.exec(readFileSync(path.join(dir, file), 'utf8'));
    if (!m) throw new Error(`no summary line in ${file}`);
    total += Number(m[1]);
    if (file.endsWith('-01')) mainThread = Number(m[1]);
  }
  return { total, mainThread };
}
