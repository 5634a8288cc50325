// Embedded due times (schedule.ts): `<data dir>/schedule/<YYYY-MM-DDTHH>`, one file per UTC hour in
// which jobs fall due, a line `<due ms> <kind> <key>` per `set` (appended and fsynced before `set`
// resolves). Memory holds only the hours that have begun: 100k domains checked daily cost about
// 4k lines loaded per hour, not 100k entries kept for the day (DESIGN §9's RSS and start-up budget).
//
// A line that was handled, or superseded by a later `set` while its hour was loaded, gets a tombstone
// `-<the line>` in its file, so a restart does not hand it out again. A later `set` of a job whose old
// line is in an hour not yet loaded leaves that line behind; it comes up at its time and its handler
// finds the job not due (the contract's at-least-once). An hour's file is deleted once every line in
// it was handled and the hour is over.
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { open, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import type { ScheduledJob, ScheduleStore } from './schedule.ts';
import { stateUnavailable } from './types.ts';

const HOUR_MS = 3_600_000;
const FILE = /^\d{4}-\d{2}-\d{2}T\d{2}$/;

interface Entry extends ScheduledJob {
  hour: number;
}

const hourOf = (ms: number) => Math.floor(ms / HOUR_MS) * HOUR_MS;
const nameOf = (hour: number) => new Date(hour).toISOString().slice(0, 13);
const entryKey = (kind: string, key: string, dueAt: number) => `${dueAt} ${kind} ${key}`;

export function openEmbeddedSchedule(dataDir: string): ScheduleStore {
  const dir = path.join(dataDir, 'schedule');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  // hours on disk not read yet, ascending (and as a set, for 100k jobs spread over a year)
  const waiting = readdirSync(dir).filter((n) => FILE.test(n)).map((n) => Date.parse(`${n}:00:00Z`)).sort((a, b) => a - b);
  const waitingSet = new Set(waiting);
  // hours read: how many of their lines are still to be handled
  const outstanding = new Map<number, number>();
  const entries = new Map<string, Entry>();
  const byJob = new Map<string, Set<string>>();
  const heap = new MinHeap();
  const claimed = new Set<string>();
  // the latest time a claim was made for: the store's only clock (the scheduler's, injected in tests)
  let seen = -Infinity;
  // appends to one hour's file take turns with its deletion
  let queue: Promise<unknown> = Promise.resolve();
  const serial = <T>(work: () => Promise<T>): Promise<T> => {
    const run = queue.then(work);
    queue = run.catch(() => undefined);
    return run;
  };

  function add(kind: string, key: string, dueAt: number, hour: number): void {
    const k = entryKey(kind, key, dueAt);
    if (entries.has(k)) return;
    entries.set(k, { kind, key, dueAt, hour });
    const job = `${kind} ${key}`;
    let set = byJob.get(job);
    if (!set) byJob.set(job, (set = new Set()));
    set.add(k);
    outstanding.set(hour, (outstanding.get(hour) ?? 0) + 1);
    heap.push(dueAt, k);
  }

  /** the entry is handled: tombstone it, and delete its hour's file once the hour is over and nothing is left */
  async function drop(k: string): Promise<void> {
    const entry = entries.get(k);
    if (!entry) return;
    entries.delete(k);
    claimed.delete(k);
    const job = `${entry.kind} ${entry.key}`;
    byJob.get(job)?.delete(k);
    if (byJob.get(job)?.size === 0) byJob.delete(job);
    const left = (outstanding.get(entry.hour) ?? 1) - 1;
    outstanding.set(entry.hour, left);
    await serial(async () => {
      if (outstanding.has(entry.hour)) await appendDurable(path.join(dir, nameOf(entry.hour)), `-${k}\n`);
    });
    if (left === 0) await removeIfDone(entry.hour);
  }

  function removeIfDone(hour: number): Promise<void> {
    if (hour + HOUR_MS > seen) return Promise.resolve();
    return serial(async () => {
      if (outstanding.get(hour) !== 0) return;
      outstanding.delete(hour);
      await rm(path.join(dir, nameOf(hour)), { force: true });
    });
  }

  async function loadBegun(): Promise<void> {
    const current = hourOf(seen);
    while (waiting.length > 0 && waiting[0] <= current) {
      const hour = waiting.shift()!;
      waitingSet.delete(hour);
      outstanding.set(hour, outstanding.get(hour) ?? 0);
      const text = await readFile(path.join(dir, nameOf(hour)), 'utf8').catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return '';
        throw new Error(`reading ${path.join(dir, nameOf(hour))}`, { cause: err });
      });
      // in file order: a line counts once for each time it was written and not tombstoned since
      const live = new Map<string, number>();
      for (const line of text.split('\n')) {
        if (line.startsWith('-')) live.set(line.slice(1), (live.get(line.slice(1)) ?? 0) - 1);
        else if (line !== '') live.set(line, (live.get(line) ?? 0) + 1);
      }
      for (const [line, count] of live) {
        // a torn last line (crash mid-append) was never acknowledged
        const match = /^(\d+) (\S+) (\S+)$/.exec(line);
        if (match && count > 0) add(match[2], match[3], Number(match[1]), hour);
      }
      if (outstanding.get(hour) === 0) await removeIfDone(hour);
    }
    // hours that emptied while they were still running
    for (const [hour, left] of outstanding) if (left === 0) await removeIfDone(hour);
  }

  async function setMany(jobs: readonly ScheduledJob[]): Promise<void> {
    await loadBegun();
    const lines = new Map<number, string[]>();
    const todo: ScheduledJob[] = [];
    for (const { kind, key, dueAt: due } of jobs) {
      if (/\s/.test(kind) || /\s/.test(key) || kind === '' || key === '') throw new Error(`a job kind and key have no spaces: ${JSON.stringify([kind, key])}`);
      const dueAt = Math.floor(due);
      const k = entryKey(kind, key, dueAt);
      const known = byJob.get(`${kind} ${key}`);
      if (known?.size === 1 && known.has(k) && !claimed.has(k)) continue;
      const hour = hourOf(dueAt);
      if (!lines.has(hour)) lines.set(hour, []);
      lines.get(hour)!.push(`${dueAt} ${kind} ${key}\n`);
      todo.push({ kind, key, dueAt });
    }
    let created = false;
    for (const [hour, text] of lines) {
      const file = path.join(dir, nameOf(hour));
      created ||= !outstanding.has(hour) && !waitingSet.has(hour);
      await serial(() => appendDurable(file, text.join('')));
    }
    // a new hour file is durable once the folder that names it is
    if (created) await serial(() => syncDir(dir));
    // the new lines are durable: older ones of these jobs are superseded
    const added: number[] = [];
    for (const { kind, key, dueAt } of todo) {
      for (const k of [...(byJob.get(`${kind} ${key}`) ?? [])]) await drop(k);
      const hour = hourOf(dueAt);
      if (outstanding.has(hour)) add(kind, key, dueAt, hour);
      else if (!waitingSet.has(hour)) {
        waitingSet.add(hour);
        added.push(hour);
      }
    }
    if (added.length > 0) {
      waiting.push(...added);
      waiting.sort((a, b) => a - b);
    }
  }

  const doneFile = (name: string) => {
    if (!/^[a-z0-9-]+$/.test(name)) throw new Error(`not a mark name: ${JSON.stringify(name)}`);
    return path.join(dir, `done-${name}`);
  };

  return {
    set: (kind, key, dueAt) => setMany([{ kind, key, dueAt }]),
    setMany,
    marked: async (name) => existsSync(doneFile(name)),
    mark: (name) => serial(() => appendDurable(doneFile(name), `${new Date().toISOString()}\n`)),
    async cancel(kind, key) {
      for (const k of [...(byJob.get(`${kind} ${key}`) ?? [])]) await drop(k);
    },
    async claim(at, limit) {
      seen = Math.max(seen, at);
      await loadBegun();
      const out: ScheduledJob[] = [];
      const skipped: Array<[number, string]> = [];
      while (out.length < limit) {
        const top = heap.peek();
        if (!top || top[0] > at) break;
        heap.pop();
        const entry = entries.get(top[1]);
        if (!entry) continue;
        if (claimed.has(top[1])) {
          skipped.push(top);
          continue;
        }
        claimed.add(top[1]);
        out.push({ kind: entry.kind, key: entry.key, dueAt: entry.dueAt });
      }
      for (const [dueAt, k] of skipped) heap.push(dueAt, k);
      return out;
    },
    finish: (job) => drop(entryKey(job.kind, job.key, job.dueAt)),
    async earliest() {
      for (;;) {
        const top = heap.peek();
        if (!top || entries.has(top[1])) break;
        heap.pop();
      }
      const candidates = [heap.peek()?.[0], waiting[0]].filter((n): n is number => n !== undefined);
      return candidates.length === 0 ? null : Math.min(...candidates);
    },
    close: () => serial(async () => undefined),
  };
}

async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Appends and fsyncs. A failed append (a full disk) is cut back off before the error goes on: the next
 * append must start a line of its own, not finish this one's half (both would be lost at the next read).
 */
async function appendDurable(file: string, line: string): Promise<void> {
  const handle = await open(file, 'a', 0o600);
  try {
    const { size } = await handle.stat();
    try {
      await handle.appendFile(line);
      await handle.datasync();
    } catch (err) {
      await handle.truncate(size).then(() => handle.datasync()).catch(() => undefined);
      throw stateUnavailable(new Error(`writing ${file}`, { cause: err }));
    }
  } finally {
    await handle.close();
  }
}

/** a binary min-heap of [due ms, entry key] */
class MinHeap {
  private readonly items: Array<[number, string]> = [];

  push(dueAt: number, key: string): void {
    const items = this.items;
    items.push([dueAt, key]);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (items[parent][0] <= items[i][0]) break;
      [items[parent], items[i]] = [items[i], items[parent]];
      i = parent;
    }
  }

  peek(): [number, string] | undefined {
    return this.items[0];
  }

  pop(): [number, string] | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < items.length && items[l][0] < items[m][0]) m = l;
        if (r < items.length && items[r][0] < items[m][0]) m = r;
        if (m === i) break;
        [items[m], items[i]] = [items[i], items[m]];
        i = m;
      }
    }
    return top;
  }
}
