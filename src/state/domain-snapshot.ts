// The domain index as one immutable, sorted byte buffer: what start-up loads instead of one record
// per domain. Opening it costs a checksum over the bytes and nothing per domain; a lookup is a
// binary search over the offsets table (about 17 steps at 100k domains), with no allocation on a miss.
//
// Layout (little-endian):
//   0   'PDI1'
//   4   u32 crc32 of every byte from offset 8 on
//   8   u32 number of domains
//   12  u32 number of projects
//   16  u32 × 3 domains per status (pending, verified, failed)
//   28  projects: u8 length + ASCII id, each
//   …   u32 × count: offset of each domain record from the first record
//   …   records sorted by hostname (byte order): u8 hostname length, hostname (ASCII),
//       u32 project number, u8 status, u16 length + JSON of {redirect?, hsts?} (0 when neither)
import { crc32 } from 'node:zlib';
import type { DomainStatus, Hsts, RedirectStatus } from './types.ts';

/** What the index keeps per domain: enough to route it and to find a project's domains. */
export interface IndexEntry {
  projectId: string;
  status: DomainStatus;
  redirect?: { to: string; status: RedirectStatus };
  hsts?: Hsts;
}

const MAGIC = 0x31494450; // 'PDI1'
const HEADER = 28;
const STATUSES: readonly DomainStatus[] = ['pending', 'verified', 'failed'];
const ASCII = /^[\x21-\x7e]{1,255}$/;

export class DomainSnapshot {
  readonly count: number;
  /** domains per status, as written */
  readonly counts: Record<DomainStatus, number>;
  private readonly buf: Buffer;
  private readonly projects: string[];
  private readonly offsets: number;
  private readonly records: number;

  private constructor(buf: Buffer, verify: boolean) {
    if (buf.length < HEADER || buf.readUInt32LE(0) !== MAGIC) throw new Error('not a domain index (bad magic)');
    if (verify && crc32(buf.subarray(8)) !== buf.readUInt32LE(4)) throw new Error('domain index damaged (checksum mismatch)');
    this.buf = buf;
    this.count = buf.readUInt32LE(8);
    const projectCount = buf.readUInt32LE(12);
    this.counts = { pending: buf.readUInt32LE(16), verified: buf.readUInt32LE(20), failed: buf.readUInt32LE(24) };
    let at = HEADER;
    this.projects = new Array<string>(projectCount);
    for (let p = 0; p < projectCount; p++) {
      const length = buf[at];
      this.projects[p] = buf.toString('latin1', at + 1, at + 1 + length);
      at += 1 + length;
    }
    this.offsets = at;
    this.records = at + 4 * this.count;
  }

  /** Reads a buffer written by encodeSnapshot; checks the checksum unless told the bytes are fresh. */
  static decode(buf: Buffer, { verify = true } = {}): DomainSnapshot {
    return new DomainSnapshot(buf, verify);
  }

  static empty(): DomainSnapshot {
    return new DomainSnapshot(encodeSnapshot([]), false);
  }

  get byteLength(): number {
    return this.buf.length;
  }

  get(hostname: string): IndexEntry | null {
    let low = 0;
    let high = this.count - 1;
    while (low <= high) {
      const mid = (low + high) >>> 1;
      const at = this.recordAt(mid);
      const order = compare(hostname, this.buf, at);
      if (order === 0) return this.entryAt(at);
      if (order < 0) high = mid - 1;
      else low = mid + 1;
    }
    return null;
  }

  *entries(): Generator<[string, IndexEntry]> {
    for (let i = 0; i < this.count; i++) {
      const at = this.recordAt(i);
      yield [this.buf.toString('latin1', at + 1, at + 1 + this.buf[at]), this.entryAt(at)];
    }
  }

  /** hostnames of one project's domains; reads no other record's fields */
  hostnamesOf(projectId: string): string[] {
    const project = this.projects.indexOf(projectId);
    const out: string[] = [];
    if (project === -1) return out;
    for (let i = 0; i < this.count; i++) {
      const at = this.recordAt(i);
      const length = this.buf[at];
      if (this.buf.readUInt32LE(at + 1 + length) === project) out.push(this.buf.toString('latin1', at + 1, at + 1 + length));
    }
    return out;
  }

  private recordAt(i: number): number {
    return this.records + this.buf.readUInt32LE(this.offsets + 4 * i);
  }

  private entryAt(at: number): IndexEntry {
    let p = at + 1 + this.buf[at];
    const projectId = this.projects[this.buf.readUInt32LE(p)];
    const status = STATUSES[this.buf[p + 4]];
    const extra = this.buf.readUInt16LE(p + 5);
    p += 7;
    if (extra === 0) return { projectId, status };
    return { projectId, status, ...(JSON.parse(this.buf.toString('utf8', p, p + extra)) as Pick<IndexEntry, 'redirect' | 'hsts'>) };
  }
}

/** hostname (a JS string) against the record's hostname bytes: < 0, 0 or > 0, in byte order */
function compare(hostname: string, buf: Buffer, at: number): number {
  const length = buf[at];
  const n = Math.min(length, hostname.length);
  for (let i = 0; i < n; i++) {
    const d = hostname.charCodeAt(i) - buf[at + 1 + i];
    if (d !== 0) return d;
  }
  return hostname.length - length;
}

/** Writes the entries (any order; one per hostname) as a snapshot. */
export function encodeSnapshot(entries: Iterable<[string, IndexEntry]>): Buffer {
  const sorted = [...entries].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const projects = new Map<string, number>();
  const counts = [0, 0, 0];
  const extras: Array<Buffer | null> = new Array(sorted.length);
  let recordBytes = 0;
  for (let i = 0; i < sorted.length; i++) {
    const [hostname, entry] = sorted[i];
    if (!ASCII.test(hostname)) throw new Error(`not an ASCII hostname: ${JSON.stringify(hostname)}`);
    if (i > 0 && sorted[i - 1][0] === hostname) throw new Error(`${hostname} is in the index twice`);
    if (!projects.has(entry.projectId)) {
      if (!ASCII.test(entry.projectId)) throw new Error(`not an ASCII project id: ${JSON.stringify(entry.projectId)}`);
      projects.set(entry.projectId, projects.size);
    }
    counts[STATUSES.indexOf(entry.status)]++;
    const extra = entry.redirect || entry.hsts ? Buffer.from(JSON.stringify({ redirect: entry.redirect, hsts: entry.hsts })) : null;
    if (extra && extra.length > 0xffff) throw new Error(`the route of ${hostname} is too long`);
    extras[i] = extra;
    recordBytes += 1 + hostname.length + 4 + 1 + 2 + (extra?.length ?? 0);
  }
  let projectBytes = 0;
  for (const id of projects.keys()) projectBytes += 1 + id.length;
  const buf = Buffer.alloc(HEADER + projectBytes + 4 * sorted.length + recordBytes);
  buf.writeUInt32LE(MAGIC, 0);
  buf.writeUInt32LE(sorted.length, 8);
  buf.writeUInt32LE(projects.size, 12);
  counts.forEach((n, s) => buf.writeUInt32LE(n, 16 + 4 * s));
  let at = HEADER;
  for (const id of projects.keys()) {
    buf[at] = id.length;
    buf.write(id, at + 1, 'latin1');
    at += 1 + id.length;
  }
  const offsets = at;
  const records = offsets + 4 * sorted.length;
  at = records;
  for (let i = 0; i < sorted.length; i++) {
    const [hostname, entry] = sorted[i];
    buf.writeUInt32LE(at - records, offsets + 4 * i);
    buf[at] = hostname.length;
    buf.write(hostname, at + 1, 'latin1');
    at += 1 + hostname.length;
    buf.writeUInt32LE(projects.get(entry.projectId)!, at);
    buf[at + 4] = STATUSES.indexOf(entry.status);
    const extra = extras[i];
    buf.writeUInt16LE(extra?.length ?? 0, at + 5);
    at += 7;
    if (extra) {
      extra.copy(buf, at);
      at += extra.length;
    }
  }
  buf.writeUInt32LE(crc32(buf.subarray(8)), 4);
  return buf;
}
