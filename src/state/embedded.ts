// Embedded backend: every noun lives in memory and every change is appended to one durable log in
// the data dir (see append-log.ts) before the caller hears back. One process owns the data dir
// (a lock file with its pid); kill -9 loses nothing that was acknowledged. While the data dir does
// not take writes (a full disk), changes reject with STATE_UNAVAILABLE and health() is 'down'; both
// end by themselves once it does again (WriteHealth below, AppendLog.probe).
import { mkdirSync } from 'node:fs';
import { runningUser } from '../running-user.ts';
import path from 'node:path';
import { AppendLog, type AppendLogOptions, type WriteReports } from './append-log.ts';
import { lockDataDir } from './data-dir-lock.ts';
import { openEmbeddedDomains } from './embedded-domains.ts';
import { openEmbeddedSchedule } from './embedded-schedule.ts';
import type { Account, ApiKey, Category, Environment, Project, Stores } from './types.ts';

type LogRecord =
  | { op: 'put'; t: string; k: string; v: unknown }
  | { op: 'del'; t: string; k: string }
  | { op: 'seq'; n: string; v: number };

const COMPACT_MIN_RECORDS = 10_000;
/** how often logs are probed while writes to the data dir fail */
const PROBE_EVERY_MS = 1000;

/** Tables of JSON values keyed by string, plus monotonic sequences, all made durable by one log. */
export class Tables {
  private readonly tables = new Map<string, Map<string, unknown>>();
  private readonly sequences = new Map<string, number>();
  private log!: AppendLog;

  static async open(file: string, options: AppendLogOptions = {}): Promise<Tables> {
    const tables = new Tables();
    tables.log = await AppendLog.open(file, (record) => tables.apply(record as LogRecord), options);
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

/**
 * Whether the data dir takes writes, for /readyz and the log. A failed write marks it failing (one
 * `onChange`); from then on every log that watches it is probed once a second, and once all of them
 * take a block of writes again it is healthy (one more `onChange`). A write that happens to succeed
 * meanwhile (into the free bytes of a full disk's last page) does not end it: only a probe does.
 */
export class WriteHealth implements WriteReports {
  #failing: { file: string; err: unknown } | null = null;
  /** counts failures, so a probe that began before one cannot end it */
  #failures = 0;
  #probes = new Set<() => Promise<void>>();
  #checking: Promise<boolean> | null = null;
  #timer: NodeJS.Timeout | null = null;
  #onChange: (failing: { file: string; err: unknown } | null) => void;

  constructor(onChange: (failing: { file: string; err: unknown } | null) => void) {
    this.#onChange = onChange;
  }

  watch(probe: () => Promise<void>): () => void {
    this.#probes.add(probe);
    return () => {
      this.#probes.delete(probe);
      if (this.#probes.size === 0 && this.#timer) {
        clearTimeout(this.#timer);
        this.#timer = null;
      }
    };
  }

  failed(file: string, err: unknown): void {
    this.#failures++;
    if (this.#failing) return;
    this.#failing = { file, err };
    this.#onChange(this.#failing);
    this.#schedule();
  }

  /** true when writes are not failing; while they are, probes first (one probe at a time) */
  check(): Promise<boolean> {
    if (!this.#failing) return Promise.resolve(true);
    return (this.#checking ??= this.#probe().finally(() => (this.#checking = null)));
  }

  async #probe(): Promise<boolean> {
    const failures = this.#failures;
    try {
      for (const probe of this.#probes) await probe();
    } catch {
      return false;
    }
    if (failures !== this.#failures || !this.#failing) return !this.#failing;
    this.#failing = null;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#onChange(null);
    return true;
  }

  #schedule(): void {
    if (this.#timer || this.#probes.size === 0) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.check().then((ok) => {
        if (!ok) this.#schedule();
      });
    }, PROBE_EVERY_MS).unref();
  }
}

export interface EmbeddedOptions {
  /** domain index changes kept in domains.log before they are folded into domains.index (tests lower it) */
  domainsCompactAt?: number;
  /** what an operator should see in the log: a torn tail cut off, writes failing and recovering, an unreadable domain file */
  onEvent?: EmbeddedEvents;
}

export type EmbeddedEvents = (level: 'info' | 'warn' | 'error', message: string, fields: Record<string, unknown>) => void;

/** The log options of one data dir: its write health, and a torn tail told to the operator. */
function logOptions(writes: WriteHealth, tell: EmbeddedEvents): (file: string) => AppendLogOptions {
  return (file) => ({
    health: writes,
    onTornTail: (bytes, offset) => tell('warn', 'cut off an incomplete last record (a write interrupted by a crash, never acknowledged)', { file, bytes, offset }),
  });
}

/**
 * A file of the data dir this process may not open (EACCES, EPERM): the usual cause is a data dir
 * made by another user (a first start as root), so the message names the dir and the fix; the
 * file is in the cause.
 */
function notOurs(err: unknown, dataDir: string): unknown {
  const code = (err as NodeJS.ErrnoException).code;
  if (code !== 'EACCES' && code !== 'EPERM') return err;
  const { name: user, uid } = runningUser();
  return new Error(`the data dir ${dataDir} (PORTICO_DATA_DIR) holds files this process (user ${user}${uid === undefined ? '' : `, uid ${uid}`}) may not open; they must belong to the user running Portico: chown -R ${user} ${dataDir}`, { cause: err });
}

export async function openEmbeddedStores(dataDir: string, options: EmbeddedOptions = {}): Promise<Stores> {
  mkdirSync(dataDir, { recursive: true });
  const tell = options.onEvent ?? (() => undefined);
  const writes = new WriteHealth((failing) => {
    if (failing) tell('error', 'writes to the data dir fail; changes are answered 503 until it takes writes again', { file: failing.file, err: failing.err instanceof Error ? failing.err.message : String(failing.err) });
    else tell('warn', 'the data dir takes writes again', { dataDir });
  });
  const optionsFor = logOptions(writes, tell);
  let releaseLock: () => void;
  try {
    releaseLock = lockDataDir(dataDir);
  } catch (err) {
    throw notOurs(err, dataDir);
  }
  let tables: Tables;
  try {
    tables = await Tables.open(path.join(dataDir, 'state.log'), optionsFor(path.join(dataDir, 'state.log')));
  } catch (err) {
    releaseLock();
    throw notOurs(err, dataDir);
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
    embeddedDomains = await openEmbeddedDomains(tables, dataDir, { compactAt: options.domainsCompactAt, log: optionsFor(path.join(dataDir, 'domains.log')), tell });
  } catch (err) {
    await tables.close();
    releaseLock();
    throw notOurs(err, dataDir);
  }
  const { domains } = embeddedDomains;
  let schedule: ReturnType<typeof openEmbeddedSchedule>;
  try {
    schedule = openEmbeddedSchedule(dataDir);
  } catch (err) {
    await Promise.all([tables.close(), embeddedDomains.close()]);
    releaseLock();
    throw notOurs(err, dataDir);
  }
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
    health: async () => ((await writes.check()) ? 'ok' : 'down'),
    close: async () => {
      await Promise.all([tables.close(), embeddedDomains.close(), schedule.close()]);
      releaseLock();
    },
  };
}
