// Embedded domains: memory and start-up must not grow with the number of domains or with what each
// carries (DESIGN §8, §9).
// - The index (hostname → project, status, route; domain-index.ts) lives in `<data dir>/domains.index`,
//   a sorted snapshot that opens without a pass over its records, plus `<data dir>/domains.log`, an
//   append-only log of the entries changed since (fsynced before a write is acknowledged). When the
//   log passes COMPACT_AT records, index and log are folded into a new snapshot (temp file, fsync,
//   rename) and the log starts over; a crash between the two leaves log records the snapshot already
//   holds, and replaying them again changes nothing (each record is a whole entry or a removal).
// - The rest (records, diagnostics, certificate state) lives in one file per domain in
//   `<data dir>/domains/`, written atomically and fsynced, read on demand.
// - The domain's timeline (src/domains/events.ts) is inside that same file, so an event and the change
//   it describes are one atomic write. Writes to one domain's file take turns (`serial`), so an update
//   and a certificate change never lose each other's part. Once a certificate state has been written
//   with an event it lives in the body file too; `<hostname>.certificate.json` is read while it does not.
//   A hostname too long for a file name (over 238 characters) names its files by a digest (stemOf).
// The body file's format, the files' names and the durable write: embedded-domain-files.ts.
// Order of writes: the body file first, then the index entry; a crash in between leaves a file no
// index names, which a later add of that hostname overwrites. A body file that fails to be written (a
// full disk) rejects with STATE_UNAVAILABLE and counts as a failed write of the data dir.
// A body file that cannot be read (damaged by hand or by the disk) is that domain's problem alone: its
// project's lists leave it out (logged once, naming the file) and reading the domain itself fails,
// until the file is repaired or restored. Routing goes by the index and keeps serving it; removing it
// goes by the index too, so an owner can take it off without repairing the file first.
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { AppendLog, type AppendLogOptions } from './append-log.ts';
import { keyedTurns } from '../turns.ts';
import type { Tables } from './embedded-tables.ts';
import { DomainIndex, indexEntryOf } from './domain-index.ts';
import { DomainSnapshot, type IndexEntry } from './domain-snapshot.ts';
import { domainFileOf, encodeBody, readBodyWithoutEvents, readJson, writeFileDurable, type BodyFile } from './embedded-domain-files.ts';
import { ownerAfterRemoval, ownerOf, type CertificateState, type Domain, type DomainStore, type PreviousOwner, type Project, type RemovedDomain } from './types.ts';
import { appendBounded, eventList, oldestFirst, type DomainEvent } from '../domains/events.ts';

// limiter-checkpoint.ts writes its file the same way and imports it from here
export { writeFileDurable };

/** `accountId`: whose timeline `events` is; `owner`: the previous owner (types.ts ownerAfterRemoval) */
type History = { accountId: string; removedAt: string; events?: DomainEvent[]; owner?: PreviousOwner | null };

/** log records replayed at most at start; past this the index is written anew */
const COMPACT_AT = 4096;

interface IndexRecord {
  h: string;
  /** the entry, or null: removed */
  e: IndexEntry | null;
}

export interface EmbeddedDomains {
  domains: DomainStore;
  close(): Promise<void>;
}

export interface EmbeddedDomainsOptions {
  /** log records replayed at most at start; past this the index is written anew */
  compactAt?: number;
  /** domains.log's options: the data dir's write health (body files report to it too), the torn-tail notice */
  log?: AppendLogOptions;
  tell?(level: 'error', message: string, fields: Record<string, unknown>): void;
}

export async function openEmbeddedDomains(tables: Tables, dataDir: string, options: EmbeddedDomainsOptions = {}): Promise<EmbeddedDomains> {
  const { compactAt = COMPACT_AT, log: logOptions = {}, tell = () => undefined } = options;
  const dir = path.join(dataDir, 'domains');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const snapshotFile = path.join(dataDir, 'domains.index');
  const index = new DomainIndex(existsSync(snapshotFile) ? readSnapshot(snapshotFile) : undefined);
  const log = await AppendLog.open(path.join(dataDir, 'domains.log'), (record) => {
    const { h, e } = record as IndexRecord;
    index.set(h, e);
  }, logOptions);
  const writeDurable = (file: string, content: string | Buffer) => writeFileDurable(file, content, logOptions.health);
  // body files that could not be read, each told once (until it reads again)
  const unreadable = new Set<string>();
  const history = tables.table<History>('domainHistory');
  // one write at a time per domain file: read-modify-write of the timeline must not interleave
  const serial = keyedTurns();
  // claimed synchronously, before the write is durable, so two adds of one name cannot both win
  const claimed = new Set<string>();

  const fileOf = (hostname: string, kind: 'domain' | 'certificate') => domainFileOf(dir, hostname, kind);
  const sameEntry = (a: IndexEntry | null, b: IndexEntry | null) => JSON.stringify(a) === JSON.stringify(b);

  /** Readers see an entry only once it is durable, so nobody sees data a crash could take back. */
  async function setEntry(hostname: string, entry: IndexEntry | null): Promise<void> {
    const written = log.append({ h: hostname, e: entry } satisfies IndexRecord);
    // requested while this append is in flight: the log folds the index once the batch is applied
    if (log.records >= compactAt) {
      log.requestCompaction(async () => {
        const bytes = index.encode();
        await writeDurable(snapshotFile, bytes);
        index.rebase(DomainSnapshot.decode(bytes, { verify: false }));
        return [];
      });
    }
    await written;
    index.set(hostname, entry);
  }

  async function read(hostname: string): Promise<Domain | null> {
    if (!index.get(hostname)) return null;
    const file = fileOf(hostname, 'domain');
    const body = await readBodyWithoutEvents(file);
    unreadable.delete(file);
    if (!body) return null;
    const { events: _events, certificate, ...domain } = body;
    return { ...domain, certificate: certificate ?? (await readJson<CertificateState>(fileOf(hostname, 'certificate'))) ?? { status: 'none' } };
  }

  async function writeBody(domain: Domain, events: DomainEvent[] = [], certificate?: CertificateState): Promise<void> {
    const { certificate: _kept, ...body } = domain;
    const file: BodyFile = certificate ? { ...body, certificate, events } : { ...body, events };
    await writeDurable(fileOf(domain.hostname, 'domain'), encodeBody(file));
  }

  /**
   * Rewrites the body file with `change` applied; false when the domain is gone. Runs in the domain's turn.
   * `of`: only while the domain of that name is the one created then (types.ts, setCertificate)
   */
  async function rewrite(hostname: string, change: (body: BodyFile) => BodyFile, of?: string): Promise<boolean> {
    if (!index.get(hostname)) return false;
    const body = await readJson<BodyFile>(fileOf(hostname, 'domain'));
    if (!body || (of !== undefined && body.createdAt !== of)) return false;
    await writeDurable(fileOf(hostname, 'domain'), encodeBody(change(body)));
    return true;
  }

  const domains: DomainStore = {
    get: read,
    listByProject: async (projectId) => {
      const found = await Promise.all(index.hostnamesOf(projectId).map((hostname) => read(hostname).catch((err: Error) => {
        const file = fileOf(hostname, 'domain');
        if (!unreadable.has(file)) {
          unreadable.add(file);
          tell('error', "a domain's file cannot be read; its project's lists leave the domain out until the file is repaired or restored", { hostname, file, err: err.message });
        }
        return null;
      })));
      return found.filter((d): d is Domain => d !== null).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
    },
    statusesByProject: async (projectId) =>
      index.hostnamesOf(projectId).flatMap((hostname) => {
        const entry = index.get(hostname);
        return entry ? [{ hostname, status: entry.status }] : [];
      }),
    create: async (domain, event) => {
      if (index.get(domain.hostname) || claimed.has(domain.hostname)) return 'taken';
      claimed.add(domain.hostname);
      try {
        const earlier = history.get(domain.hostname);
        const kept = earlier?.accountId === domain.accountId ? (earlier.events ?? []) : [];
        await serial(domain.hostname, () => writeBody(domain, appendBounded(kept, eventList(event))));
        await rm(fileOf(domain.hostname, 'certificate'), { force: true });
        await setEntry(domain.hostname, indexEntryOf(domain));
      } finally {
        claimed.delete(domain.hostname);
      }
      return null;
    },
    update: (domain, event) =>
      serial(domain.hostname, async () => {
        const before = index.get(domain.hostname);
        if (!before) return null;
        const { certificate: _certificate, ...fields } = domain;
        if (!(await rewrite(domain.hostname, (body) => ({ ...fields, ...(body.certificate ? { certificate: body.certificate } : {}), events: appendBounded(body.events ?? [], eventList(event)) })))) return null;
        const after = indexEntryOf(domain);
        if (!sameEntry(before, after)) await setEntry(domain.hostname, after);
        return read(domain.hostname);
      }),
    setCertificate: async (hostname, certificate, event, of) => {
      if (eventList(event).length === 0) {
        // no event: the certificate file alone, unless the body file already holds the state
        await serial(hostname, async () => {
          if (!index.get(hostname)) return;
          const body = await readJson<BodyFile>(fileOf(hostname, 'domain'));
          if (!body || (of !== undefined && body.createdAt !== of)) return;
          if (body.certificate) await rewrite(hostname, (b) => ({ ...b, certificate }));
          else await writeDurable(fileOf(hostname, 'certificate'), JSON.stringify(certificate));
        });
        return;
      }
      await serial(hostname, () => rewrite(hostname, (body) => ({ ...body, certificate, events: appendBounded(body.events ?? [], eventList(event)) }), of));
    },
    appendEvent: async (hostname, event, of) => {
      await serial(hostname, () => rewrite(hostname, (body) => ({ ...body, events: appendBounded(body.events ?? [], [event]) }), of));
    },
    events: async (hostname) => {
      if (!index.get(hostname)) return [];
      return oldestFirst((await readJson<BodyFile>(fileOf(hostname, 'domain')))?.events ?? []);
    },
    // all of it in the domain's turn: of removals at the same moment one finds the domain, the others
    // null, so the history (and the timeline it keeps) is written once
    remove: (hostname, at, event) =>
      serial(hostname, async () => {
        const entry = index.get(hostname);
        if (!entry) return null;
        const file = fileOf(hostname, 'domain');
        const earlier = history.get(hostname);
        const previous = earlier ? ownerOf(earlier) : null;
        let removed: RemovedDomain;
        let record: History;
        const domain = await read(hostname).catch((err: Error) => {
          tell('error', "a domain's file cannot be read; the domain is removed from its index entry, its timeline with the file", { hostname, file, err: err.message });
          return null;
        });
        if (domain) {
          const timeline = (await readJson<BodyFile>(file))?.events ?? [];
          removed = domain;
          record = { accountId: domain.accountId, removedAt: at, events: appendBounded(timeline, eventList(event)), owner: ownerAfterRemoval(domain, at, previous) };
        } else {
          // the file is damaged or gone: the index and the project say whose it was. Whether the claim
          // was proven is not known, so the guard keeps the stricter owner: an earlier one, or this one.
          const accountId = tables.table<Project>('projects').get(entry.projectId)?.accountId ?? '';
          removed = { hostname, projectId: entry.projectId, accountId, primary: true };
          record = { accountId, removedAt: at, events: [...eventList(event)], owner: previous ?? (accountId ? { accountId, removedAt: at } : null) };
        }
        await tables.put('domainHistory', hostname, record satisfies History);
        await setEntry(hostname, null);
        await Promise.all([rm(file, { force: true }), rm(fileOf(hostname, 'certificate'), { force: true })]);
        unreadable.delete(file);
        return removed;
      }),
    previousOwner: async (hostname) => {
      const earlier = history.get(hostname);
      return earlier ? ownerOf(earlier) : null;
    },
    route: async (hostname) => index.route(hostname),
    // every change is made by this process and is in the index the moment it is durable
    indexedRoute: (hostname) => index.route(hostname),
    countByStatus: async () => index.countByStatus(),
  };
  return { domains, close: () => log.close() };
}

function readSnapshot(file: string): DomainSnapshot {
  try {
    return DomainSnapshot.decode(readFileSync(file));
  } catch (err) {
    throw new Error(`reading ${file}; refusing to start`, { cause: err });
  }
}
