// Embedded backend: every noun lives in memory and every change is appended to one durable log in
// the data dir (see append-log.ts) before the caller hears back. One process owns the data dir
// (a lock file with its pid); kill -9 loses nothing that was acknowledged.
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { AppendLog } from './append-log.ts';
import { lockDataDir } from './data-dir-lock.ts';
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
