// Embedded domains: memory and start-up must not grow with what each domain carries (DESIGN §8).
// The durable log holds one small index entry per domain — project, status, route — which is all
// that start-up replays and routing needs. The rest (records, diagnostics, certificate state) lives
// in one file per domain in `<data dir>/domains/`, written atomically and fsynced, read on demand.
// Order of writes: the body file first, then the index entry; a crash in between leaves a file no
// index names, which a later add of that hostname overwrites.
import { mkdirSync } from 'node:fs';
import { open, readFile, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Tables } from './embedded.ts';
import { routeOf, type CertificateState, type Domain, type DomainRoute, type DomainStatus, type DomainStore } from './types.ts';

interface IndexEntry {
  projectId: string;
  status: DomainStatus;
  createdAt: string;
  route: DomainRoute | null;
}

const HOSTNAME = /^[a-z0-9_.-]+$/;

export function openEmbeddedDomains(tables: Tables, dataDir: string): DomainStore {
  const dir = path.join(dataDir, 'domains');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const index = tables.table<IndexEntry>('domainIndex');
  const history = tables.table<{ accountId: string; removedAt: string }>('domainHistory');
  // claimed synchronously, before the write is durable, so two adds of one name cannot both win
  const claimed = new Set<string>();

  const fileOf = (hostname: string, kind: 'domain' | 'certificate') => {
    // hostnames are validated before they get here; refuse anything that could leave the folder
    if (!HOSTNAME.test(hostname) || hostname.includes('..')) throw new Error(`not a hostname: ${JSON.stringify(hostname)}`);
    return path.join(dir, kind === 'domain' ? `${hostname}.json` : `${hostname}.certificate.json`);
  };
  const entryOf = (domain: Domain): IndexEntry => ({ projectId: domain.projectId, status: domain.status, createdAt: domain.createdAt, route: routeOf(domain) });
  const sameEntry = (a: IndexEntry, b: IndexEntry) => JSON.stringify(a) === JSON.stringify(b);

  async function read(hostname: string): Promise<Domain | null> {
    if (!index.has(hostname)) return null;
    const [body, certificate] = await Promise.all([readJson<Domain>(fileOf(hostname, 'domain')), readJson<CertificateState>(fileOf(hostname, 'certificate'))]);
    return body ? { ...body, certificate: certificate ?? { status: 'none' } } : null;
  }

  async function writeBody(domain: Domain): Promise<void> {
    const { certificate: _kept, ...body } = domain;
    await writeDurable(fileOf(domain.hostname, 'domain'), JSON.stringify(body));
  }

  return {
    get: read,
    listByProject: async (projectId) => {
      const hostnames = [...index].filter(([, e]) => e.projectId === projectId).sort(([, a], [, b]) => a.createdAt.localeCompare(b.createdAt)).map(([h]) => h);
      return (await Promise.all(hostnames.map(read))).filter((d): d is Domain => d !== null);
    },
    create: async (domain) => {
      if (index.has(domain.hostname) || claimed.has(domain.hostname)) return 'taken';
      claimed.add(domain.hostname);
      try {
        await writeBody(domain);
        await rm(fileOf(domain.hostname, 'certificate'), { force: true });
        await tables.put('domainIndex', domain.hostname, entryOf(domain));
      } finally {
        claimed.delete(domain.hostname);
      }
      return null;
    },
    update: async (domain) => {
      const before = index.get(domain.hostname);
      if (!before) return null;
      await writeBody(domain);
      const after = entryOf(domain);
      if (!sameEntry(before, after)) await tables.put('domainIndex', domain.hostname, after);
      return read(domain.hostname);
    },
    setCertificate: async (hostname, certificate) => {
      if (index.has(hostname)) await writeDurable(fileOf(hostname, 'certificate'), JSON.stringify(certificate));
    },
    remove: async (hostname, at) => {
      const domain = await read(hostname);
      if (!domain) return null;
      await tables.put('domainHistory', hostname, { accountId: domain.accountId, removedAt: at });
      await tables.del('domainIndex', hostname);
      await Promise.all([rm(fileOf(hostname, 'domain'), { force: true }), rm(fileOf(hostname, 'certificate'), { force: true })]);
      return domain;
    },
    previousOwner: async (hostname) => history.get(hostname) ?? null,
    routes: async () => {
      const routes = new Map<string, DomainRoute>();
      for (const [hostname, entry] of index) if (entry.route) routes.set(hostname, entry.route);
      return routes;
    },
    route: async (hostname) => index.get(hostname)?.route ?? null,
    countByStatus: async () => {
      const counts: Record<DomainStatus, number> = { pending: 0, verified: 0, failed: 0 };
      for (const entry of index.values()) counts[entry.status]++;
      return counts;
    },
  };
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
async function writeDurable(file: string, content: string): Promise<void> {
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
