// Embedded backend: every noun lives in memory and every change is appended to one durable log in
// the data dir (see append-log.ts) before the caller hears back. One process owns the data dir
// (a lock file with its pid); kill -9 loses nothing that was acknowledged. While the data dir does
// not take writes (a full disk), changes reject with STATE_UNAVAILABLE and health() is 'down'; both
// end by themselves once it does again (WriteHealth in embedded-health.ts, AppendLog.probe).
// The tables and their log are in embedded-tables.ts; domains and due times have files of their own
// (embedded-domains.ts, embedded-schedule.ts).
import { mkdirSync } from 'node:fs';
import { runningUser } from '../running-user.ts';
import path from 'node:path';
import type { AppendLogOptions } from './append-log.ts';
import { lockDataDir } from './data-dir-lock.ts';
import { openEmbeddedDomains } from './embedded-domains.ts';
import { WriteHealth } from './embedded-health.ts';
import { openEmbeddedSchedule } from './embedded-schedule.ts';
import { Tables } from './embedded-tables.ts';
import { IDEMPOTENCY_TTL_MS, idempotencyId, type Account, type ApiKey, type Category, type Environment, type Project, type Stores } from './types.ts';

export { Tables } from './embedded-tables.ts';
export { WriteHealth } from './embedded-health.ts';

/** an idempotency key's first use: the category it made, with the fields it was asked for (JSON) */
interface OnceRecord {
  id: number;
  fields: string;
  at: number;
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
  // idempotency keys used (by digest), and the creates under one still being made
  const onceKeys = (environment: Environment) => tables.table<OnceRecord>(`category-once:${environment}`);
  const onceRunning = new Map<string, Promise<unknown>>();
  const sortedCategories = new Map<Environment, Category[]>();
  /**
   * A new category, the cap checked; `remember` is written with it (an idempotency key's record,
   * appended before the category: a crash between them leaves a record whose category is missing,
   * which the next use of the key makes anew).
   */
  const createCategory = async (environment: Environment, fields: Omit<Category, 'id'>, cap: number, remember?: (id: number) => Promise<void>): Promise<Category | 'full'> => {
    // creates still being fsynced count against the cap too
    if (categories(environment).size + (pendingCreates.get(environment) ?? 0) >= cap) return 'full';
    pendingCreates.set(environment, (pendingCreates.get(environment) ?? 0) + 1);
    try {
      const { value: id, durable } = tables.next(`category:${environment}`);
      const category: Category = { id, ...fields };
      await Promise.all([durable, remember?.(id), tables.put(`categories:${environment}`, String(id), category)]);
      sortedCategories.delete(environment);
      return category;
    } finally {
      pendingCreates.set(environment, pendingCreates.get(environment)! - 1);
    }
  };
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
      create: (environment, fields, cap) => createCategory(environment, fields, cap),
      createOnce: async (environment, fields, cap, once) => {
        const id = idempotencyId(once);
        const running = `${environment}\n${id}`;
        // a create under the same key still being made: its answer decides
        for (let ahead = onceRunning.get(running); ahead; ahead = onceRunning.get(running)) await ahead.catch(() => undefined);
        const text = JSON.stringify(fields);
        const seen = onceKeys(environment).get(id);
        if (seen && Date.now() - seen.at < IDEMPOTENCY_TTL_MS) {
          if (seen.fields !== text) return 'key_reused';
          const category = categories(environment).get(String(seen.id));
          // a record without its category: the create it was written with never finished
          if (category) return { replayed: category };
        }
        const work = createCategory(environment, fields, cap, (made) => tables.put(`category-once:${environment}`, id, { id: made, fields: text, at: Date.now() } satisfies OnceRecord));
        onceRunning.set(running, work);
        try {
          return await work;
        } finally {
          onceRunning.delete(running);
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
