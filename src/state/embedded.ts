// Embedded backend: every noun lives in memory and every change is appended to one durable log in
// the data dir (see append-log.ts) before the caller hears back. One process owns the data dir
// (a lock file with its pid); kill -9 loses nothing that was acknowledged.
import { linkSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { AppendLog } from './append-log.ts';
import { openEmbeddedDomains } from './embedded-domains.ts';
import { openEmbeddedSchedule } from './embedded-schedule.ts';
import type { Account, ApiKey, Category, Environment, Project, Stores } from './types.ts';

type LogRecord =
  | { op: 'put'; t: string; k: string; v: unknown }
  | { op: 'del'; t: string; k: string }
  | { op: 'seq'; n: string; v: number };

const COMPACT_MIN_RECORDS = 10_000;

/** Tables of JSON values keyed by string, plus monotonic sequences, all made durable by one log. */
export class Tables {
  private readonly tables = new Map<string, Map<string, unknown>>();
  private readonly sequences = new Map<string, number>();
  private log!: AppendLog;

  static async open(file: string): Promise<Tables> {
    const tables = new Tables();
    tables.log = await AppendLog.open(file, (record) => tables.apply(record as LogRecord));
    return tables;
  }

  table<T>(name: string): Map<string, T> {
    let table = this.tables.get(name);
    if (!table) this.tables.set(name, (table = new Map()));
    return table as Map<string, T>;
  }

  /** Readers see the value only once it is durable, so nobody sees data a crash could take back. */
  async put(t: string, k: string, v: unknown): Promise<void> {
    await this.write({ op: 'put', t, k, v });
    this.table(t).set(k, v);
  }

  async del(t: string, k: string): Promise<void> {
    await this.write({ op: 'del', t, k });
    this.table(t).delete(k);
  }

  /** Next value of a sequence, taken synchronously so concurrent callers never share one. */
  next(n: string): { value: number; durable: Promise<void> } {
    const value = (this.sequences.get(n) ?? 0) + 1;
    this.sequences.set(n, value);
    return { value, durable: this.write({ op: 'seq', n, v: value }) };
  }

  close(): Promise<void> {
    return this.log.close();
  }

  private write(record: LogRecord): Promise<void> {
    const written = this.log.append(record);
    const live = [...this.tables.values()].reduce((sum, t) => sum + t.size, 0) + this.sequences.size;
    if (this.log.records > COMPACT_MIN_RECORDS && this.log.records > 4 * live) {
      this.log.requestCompaction(() => this.snapshot());
    }
    return written;
  }

  private snapshot(): LogRecord[] {
    const records: LogRecord[] = [];
    for (const [n, v] of this.sequences) records.push({ op: 'seq', n, v });
    for (const [t, table] of this.tables) for (const [k, v] of table) records.push({ op: 'put', t, k, v });
    return records;
  }

  private apply(record: LogRecord): void {
    if (record.op === 'put') this.table(record.t).set(record.k, record.v);
    else if (record.op === 'del') this.table(record.t).delete(record.k);
    else if (record.op === 'seq') this.sequences.set(record.n, Math.max(record.v, this.sequences.get(record.n) ?? 0));
  }
}

export interface EmbeddedOptions {
  /** domain index changes kept in domains.log before they are folded into domains.index (tests lower it) */
  domainsCompactAt?: number;
}

export async function openEmbeddedStores(dataDir: string, options: EmbeddedOptions = {}): Promise<Stores> {
  mkdirSync(dataDir, { recursive: true });
  const releaseLock = lockDataDir(dataDir);
  let tables: Tables;
  try {
    tables = await Tables.open(path.join(dataDir, 'state.log'));
  } catch (err) {
    releaseLock();
    throw err;
  }
  const accounts = tables.table<Account>('accounts');
  const keys = tables.table<ApiKey>('keys');
  const keysByHash = new Map<string, string>();
  for (const key of keys.values()) keysByHash.set(key.hash, key.id);
  const categories = (environment: Environment) => tables.table<Category>(`categories:${environment}`);
  const pendingCreates = new Map<Environment, number>();
  const sortedCategories = new Map<Environment, Category[]>();
  const projects = tables.table<Project>('projects');
  const projectNames = new Map<string, string>();
  for (const project of projects.values()) projectNames.set(project.name, project.id);
  let embeddedDomains: Awaited<ReturnType<typeof openEmbeddedDomains>>;
  try {
    embeddedDomains = await openEmbeddedDomains(tables, dataDir, options.domainsCompactAt);
  } catch (err) {
    await tables.close();
    releaseLock();
    throw err;
  }
  const { domains } = embeddedDomains;
  const schedule = openEmbeddedSchedule(dataDir);
  const handlers: Array<(topic: string) => void> = [];

  return {
    accounts: {
      create: (account) => tables.put('accounts', account.id, account),
      get: async (id) => accounts.get(id) ?? null,
      update: async (account) => {
        if (!accounts.has(account.id)) return null;
        await tables.put('accounts', account.id, account);
        return account;
      },
    },
    keys: {
      create: async (key) => {
        await tables.put('keys', key.id, key);
        keysByHash.set(key.hash, key.id);
      },
      get: async (id) => keys.get(id) ?? null,
      findByHash: async (hash) => {
        const id = keysByHash.get(hash);
        return id === undefined ? null : (keys.get(id) ?? null);
      },
      revoke: async (id, at) => {
        const key = keys.get(id);
        if (!key) return null;
        if (key.revokedAt) return key;
        const revoked = { ...key, revokedAt: at };
        await tables.put('keys', id, revoked);
        return revoked;
      },
    },
    categories: {
      list: async (environment) => {
        // the same array until the next create: callers may memoise on it (the API caches its JSON)
        let list = sortedCategories.get(environment);
        if (!list) sortedCategories.set(environment, (list = [...categories(environment).values()].sort((a, b) => a.id - b.id)));
        return list;
      },
      get: async (environment, id) => categories(environment).get(String(id)) ?? null,
      create: async (environment, fields, cap) => {
        // creates still being fsynced count against the cap too
        if (categories(environment).size + (pendingCreates.get(environment) ?? 0) >= cap) return 'full';
        pendingCreates.set(environment, (pendingCreates.get(environment) ?? 0) + 1);
        try {
          const { value: id, durable } = tables.next(`category:${environment}`);
          const category: Category = { id, ...fields };
          await Promise.all([durable, tables.put(`categories:${environment}`, String(id), category)]);
          sortedCategories.delete(environment);
          return category;
        } finally {
          pendingCreates.set(environment, pendingCreates.get(environment)! - 1);
        }
      },
    },
    projects: {
      create: async (project) => {
        if (projectNames.has(project.name)) return 'name_taken';
        projectNames.set(project.name, project.id);
        try {
          await tables.put('projects', project.id, project);
        } catch (err) {
          projectNames.delete(project.name);
          throw err;
        }
        return null;
      },
      get: async (id) => projects.get(id) ?? null,
      list: async () => [...projects.values()].sort((a, b) => a.createdAt.localeCompare(b.createdAt)),
      update: async (project) => {
        if (!projects.has(project.id)) return null;
        await tables.put('projects', project.id, project);
        return project;
      },
    },
    domains,
    events: {
      // one process: a change is known here the moment it is made
      publish: async (topic) => {
        for (const handler of handlers) handler(topic);
      },
      subscribe: (handler) => {
        handlers.push(handler);
      },
    },
    schedule,
    health: async () => 'ok',
    close: async () => {
      await Promise.all([tables.close(), embeddedDomains.close(), schedule.close()]);
      releaseLock();
    },
  };
}

// Locks this process holds, by token. A lock file naming our own pid but a token we do not hold was
// left by an earlier process that had the same pid (a container's pid 1 after kill -9): stale.
const heldLocks = new Set<string>();

/**
 * One process owns the data dir. A lock left by a dead process (kill -9) is taken over.
 *
 * Taking over must not let two processes that start together both win. Removing the stale file and
 * creating a new one would: B could remove the lock A had just made in its place. So the stale file
 * is first moved aside under a name of this process's own (a rename is atomic: of several processes,
 * one moves it), and only a process that moved exactly the stale holder's file goes on to create
 * the lock (`wx`: exactly one creator). One that finds it moved a newer holder's file puts it back
 * and is refused. In the instant that file is away a third process can create one of its own, and
 * the put-back then fails: so a process that found a lock file in its way does not count the lock
 * as its own until it has waited SETTLE_MS and read its own token there again (else it is refused,
 * and one that finds no file at all starts over).
 */
function lockDataDir(dataDir: string): () => void {
  const file = path.join(dataDir, 'portico.lock');
  const token = `${process.pid} ${randomBytes(8).toString('hex')}`;
  const locked = (pid: number) => Object.assign(new Error(`${dataDir} is in use by process ${pid}; one process owns the embedded state (set PORTICO_REDIS_URL to run many)`), { code: 'DATA_DIR_LOCKED' });
  for (let attempt = 0; ; attempt++) {
    let created = false;
    try {
      writeFileSync(file, token, { flag: 'wx' }); // atomic: exactly one opener creates it
      created = true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    if (created) {
      if (attempt === 0) break; // no lock file was in the way: nobody else is taking one over
      sleepSync(SETTLE_MS);
      const now = readIfThere(file);
      if (now === token) break;
      if (now !== null) throw locked(Number(now.split(' ')[0]));
      continue; // moved away and not put back: start over
    }
    const holder = readIfThere(file);
    if (holder === null) continue; // released meanwhile
    const pid = Number(holder.split(' ')[0]);
    if (attempt > 3) throw locked(pid); // others keep taking it: let them
    if (heldLocks.has(holder) || (Number.isInteger(pid) && pid > 0 && pid !== process.pid && isAlive(pid))) throw locked(pid);
    const aside = `${file}.${token.replace(' ', '.')}`;
    try {
      renameSync(file, aside);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // another process moved it first
      throw err;
    }
    const moved = readFileSync(aside, 'utf8');
    if (moved !== holder) {
      // a process that took over first had already made its lock here: that one stays the owner
      // (should a third have created one in the instant it was away, the link fails, and the first
      // finds the third's token when it reads its lock again: the third is the owner)
      try {
        linkSync(aside, file);
      } finally {
        rmSync(aside, { force: true });
      }
      throw locked(Number(moved.split(' ')[0]));
    }
    rmSync(aside, { force: true });
  }
  heldLocks.add(token);
  return () => {
    heldLocks.delete(token);
    try {
      if (readFileSync(file, 'utf8') === token) rmSync(file, { force: true });
    } catch {
      // already gone: nothing to release
    }
  };
}

/** how long a process that took the lock amid others waits before it trusts its lock file (see lockDataDir) */
const SETTLE_MS = 200;

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function readIfThere(file: string): string | null {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
