// A domain's own files in `<data dir>/domains/` (see embedded-domains.ts for how they fit with the
// index): what the body file holds, how the files are named, how they are read, and the durable
// write every file of the data dir goes through.
import { createHash } from 'node:crypto';
import { open, readFile, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import type { WriteReports } from './append-log.ts';
import { stateUnavailable, type CertificateState, type Domain } from './types.ts';
import type { DomainEvent } from '../domains/events.ts';

/** what the body file holds: the domain, its timeline, and (once written with an event) its certificate state */
export type BodyFile = Omit<Domain, 'certificate'> & { certificate?: CertificateState; events?: DomainEvent[] };

const HOSTNAME = /^[a-z0-9_.-]+$/;
/** a file name's bytes on the filesystems Portico runs on (ext4, xfs, btrfs, overlayfs) */
const NAME_MAX = 255;
const LONGEST_SUFFIX = '.certificate.json'.length;

/** A domain's files are named by its hostname; one too long for that (up to 253 characters are valid)
 * by its first 200 characters, `~` (never in a hostname) and a digest of the whole name. */
function stemOf(hostname: string): string {
  if (hostname.length + LONGEST_SUFFIX <= NAME_MAX) return hostname;
  return `${hostname.slice(0, 200)}~${createHash('sha256').update(hostname).digest('hex').slice(0, 32)}`;
}

export function domainFileOf(dir: string, hostname: string, kind: 'domain' | 'certificate'): string {
  // hostnames are validated before they get here; refuse anything that could leave the folder
  if (!HOSTNAME.test(hostname) || hostname.includes('..')) throw new Error(`not a hostname: ${JSON.stringify(hostname)}`);
  return path.join(dir, `${stemOf(hostname)}${kind === 'domain' ? '.json' : '.certificate.json'}`);
}

// The timeline is written last in the body file, so reading a domain (handshakes, listings of a
// project's thousand domains) parses only what comes before it, not up to 200 events.
const EVENTS_KEY = ',"events":[';

export function encodeBody(body: BodyFile): string {
  const { events, ...rest } = body;
  return JSON.stringify({ ...rest, events: events ?? [] });
}

export async function readBodyWithoutEvents(file: string): Promise<BodyFile | null> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new Error(`reading ${file}`, { cause: err });
  }
  // no domain field holds this key: the first one found is the timeline's (escaped quotes inside strings never match)
  const at = text.indexOf(EVENTS_KEY);
  try {
    return JSON.parse(at === -1 ? text : `${text.slice(0, at)}}`) as BodyFile;
  } catch (err) {
    throw new Error(`reading ${file}`, { cause: err });
  }
}

export async function readJson<T>(file: string): Promise<T | null> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as T;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new Error(`reading ${file}`, { cause: err });
  }
}

/**
 * temp file, fsync, rename, fsync the folder: the new content or the old, never a torn one. A failure
 * (a full disk) leaves no temp file behind and is reported to `health`; before the rename it leaves
 * the old content.
 */
export async function writeFileDurable(file: string, content: string | Buffer, health?: WriteReports): Promise<void> {
  // not named after `file`: a name near the longest a file may have leaves no room for a suffix
  const temp = path.join(path.dirname(file), `.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`);
  try {
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
  } catch (err) {
    await rm(temp, { force: true }).catch(() => undefined);
    health?.failed(file, err);
    throw stateUnavailable(new Error(`writing ${file}`, { cause: err }));
  }
}
