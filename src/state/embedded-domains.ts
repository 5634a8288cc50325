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
// Order of writes: the body file first, then the index entry; a crash in between leaves a file no
// index names, which a later add of that hostname overwrites.
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { open, readFile, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { AppendLog } from './append-log.ts';
import type { Tables } from './embedded.ts';
import { DomainIndex, indexEntryOf } from './domain-index.ts';
import { DomainSnapshot, type IndexEntry } from './domain-snapshot.ts';
import type { CertificateState, Domain, DomainStore } from './types.ts';

/** log records replayed at most at start; past this the index is written anew */
const COMPACT_AT = 4096;
const HOSTNAME = /^[a-z0-9_.-]+$/;

interface IndexRecord {
  h: string;
  /** the entry, or null: removed */
  e: IndexEntry | null;
}

export interface EmbeddedDomains {
  domains: DomainStore;
  close(): Promise<void>;
}

export async function openEmbeddedDomains(tables: Tables, dataDir: string, compactAt = COMPACT_AT): Promise<EmbeddedDomains> {
  const dir = path.join(dataDir, 'domains');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const snapshotFile = path.join(dataDir, 'domains.index');
  const index = new DomainIndex(existsSync(snapshotFile) ? readSnapshot(snapshotFile) : undefined);
  const log = await AppendLog.open(path.join(dataDir, 'domains.log'), (record) => {
    const { h, e } = record as IndexRecord;
    index.set(h, e);
  });
  const history = tables.table<{ accountId: string; removedAt: string }>('domainHistory');
  // claimed synchronously, before the write is durable, so two adds of one name cannot both win
  const claimed = new Set<string>();

  const fileOf = (hostname: string, kind: 'domain' | 'certificate') => {
    // hostnames are validated before they get here; refuse anything that could leave the folder
    if (!HOSTNAME.test(hostname) || hostname.includes('..')) throw new Error(`not a hostname: ${JSON.stringify(hostname)}`);
    return path.join(dir, kind === 'domain' ? `${hostname}.json` : `${hostname}.certificate.json`);
  };
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
    const [body, certificate] = await Promise.all([readJson<Domain>(fileOf(hostname, 'domain')), readJson<CertificateState>(fileOf(hostname, 'certificate'))]);
    return body ? { ...body, certificate: certificate ?? { status: 'none' } } : null;
  }

  async function writeBody(domain: Domain): Promise<void> {
    const { certificate: _kept, ...body } = domain;
    await writeDurable(fileOf(domain.hostname, 'domain'), JSON.stringify(body));
  }

  const domains: DomainStore = {
    get: read,
    listByProject: async (projectId) => {
      const found = await Promise.all(index.hostnamesOf(projectId).map(read));
      return found.filter((d): d is Domain => d !== null).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
    },
    create: async (domain) => {
      if (index.get(domain.hostname) || claimed.has(domain.hostname)) return 'taken';
      claimed.add(domain.hostname);
      try {
        await writeBody(domain);
        await rm(fileOf(domain.hostname, 'certificate'), { force: true });
        await setEntry(domain.hostname, indexEntryOf(domain));
      } finally {
        claimed.delete(domain.hostname);
      }
      return null;
    },
    update: async (domain) => {
      const before = index.get(domain.hostname);
      if (!before) return null;
      await writeBody(domain);
      const after = indexEntryOf(domain);
      if (!sameEntry(before, after)) await setEntry(domain.hostname, after);
      return read(domain.hostname);
    },
    setCertificate: async (hostname, certificate) => {
      if (index.get(hostname)) await writeDurable(fileOf(hostname, 'certificate'), JSON.stringify(certificate));
    },
    remove: async (hostname, at) => {
      const domain = await read(hostname);
      if (!domain) return null;
      await tables.put('domainHistory', hostname, { accountId: domain.accountId, removedAt: at });
      await setEntry(hostname, null);
      await Promise.all([rm(fileOf(hostname, 'domain'), { force: true }), rm(fileOf(hostname, 'certificate'), { force: true })]);
      return domain;
    },
    previousOwner: async (hostname) => history.get(hostname) ?? null,
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

async function readJson<T>(file: string): Promise<T | null> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as T;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new Error(`reading ${file}`, { cause: err });
  }
}

/** temp file, fsync, rename, fsync the folder: the new content or the old, never a torn one */
async function writeDurable(file: string, content: string | Buffer): Promise<void> {
  const temp = `${file}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  const handle = await open(temp, 'w', 0o600);
  try {
    await handle.writeFile(content);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await rename(temp, file);
  const folder = await open(path.dirname(file), 'r');
  try {
    await folder.sync();
  } finally {
    await folder.close();
  }
}
