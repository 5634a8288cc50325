// A durable append-only log of JSON records, one per line: `<crc32 hex> <json>\n`.
// - append() resolves only after the record is written and fdatasync'ed. Appends that arrive while a
//   write is in flight are grouped into the next write (group commit): one fsync serves many.
// - A write that fails (disk full, a file size limit, an I/O error) is cut back off the file at once
//   (ftruncate to the last acknowledged byte, fsync) before its batch is rejected with
//   STATE_UNAVAILABLE: the file holds exactly what was acknowledged, so a record answered with an error
//   does not come back after a restart, and the next append does not land behind half a record.
//   Later appends are tried as they come; probe() (the owner's, once a second while writes fail) says
//   when the disk takes writes again.
// - open() replays every record. An incomplete last line (no newline: a crash mid-write, never
//   acknowledged) is cut off and reported. A complete line that does not check out is damage, also
//   on the last line: it stops the start at its line and byte offset, so nothing acknowledged is
//   silently lost.
// - compact() replaces the file with a snapshot (write temp, fsync, rename, fsync dir).
import { open, rename, readFile, rm, type FileHandle } from 'node:fs/promises';
import { openSync, closeSync, fsyncSync } from 'node:fs';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import { stateUnavailable } from './types.ts';

interface Waiter {
  resolve: () => void;
  reject: (err: Error) => void;
}

interface Pending extends Waiter {
  line: string;
}

/** what the probe appends (no newline: a crash that leaves it is a torn tail, cut at the next start) */
const PROBE = Buffer.alloc(4096, ' ');

/** where a log reports its failed writes, and who probes it while they fail (embedded-health.ts's WriteHealth) */
export interface WriteReports {
  failed(file: string, err: unknown): void;
  /** calls `probe` while writes fail; returns the way to stop */
  watch(probe: () => Promise<void>): () => void;
}

export interface AppendLogOptions {
  health?: WriteReports;
  /** an incomplete last line was cut off at open */
  onTornTail?(bytes: number, offset: number): void;
}

export class AppendLog {
  readonly file: string;
  private handle: FileHandle;
  private queue: Pending[] = [];
  private probes: Waiter[] = [];
  private flushing: Promise<void> | null = null;
  private compactWith: (() => unknown[] | Promise<unknown[]>) | null = null;
  /** bytes of the file that were acknowledged; anything past them is a failed write */
  private size: number;
  /** the file may hold bytes past `size`, or (reopen) the handle may not be the file's */
  private dirty = false;
  private reopen = false;
  private readonly health: WriteReports | undefined;
  private readonly unwatch: () => void;
  /** records written since the last snapshot; the owner uses it to decide when to compact */
  records = 0;

  private constructor(file: string, handle: FileHandle, records: number, size: number, health: WriteReports | undefined) {
    this.file = file;
    this.handle = handle;
    this.records = records;
    this.size = size;
    this.health = health;
    this.unwatch = health?.watch(() => this.probe()) ?? (() => undefined);
  }

  static async open(file: string, apply: (record: unknown) => void, options: AppendLogOptions = {}): Promise<AppendLog> {
    let text = '';
    try {
      text = await readFile(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new Error(`reading ${file}`, { cause: err });
    }
    const { records, goodBytes, damage } = replay(text, apply);
    if (damage !== null) {
      // one record per line: the records before it are the lines before it
      throw new Error(`${file}: line ${records + 1} (byte offset ${goodBytes}) is damaged (${damage}); refusing to start rather than drop a record. Restore the file from a backup, or delete that line by hand if losing its record is acceptable`);
    }
    const handle = await open(file, 'a+');
    const torn = Buffer.byteLength(text) - goodBytes;
    if (torn > 0) {
      // an incomplete last line: a write cut short by a crash, never acknowledged
      await handle.truncate(goodBytes);
      await handle.datasync();
      options.onTornTail?.(torn, goodBytes);
    }
    fsyncDir(path.dirname(file));
    return new AppendLog(file, handle, records, goodBytes, options.health);
  }

  append(record: unknown): Promise<void> {
    const line = encode(record);
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ line, resolve, reject });
      if (!this.flushing) this.flushing = this.flush();
    });
  }

  /** Resolves when the file takes a block of writes again (written, fsynced, then cut off); rejects while it does not. */
  probe(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.probes.push({ resolve, reject });
      if (!this.flushing) this.flushing = this.flush();
    });
  }

  /**
   * Rewrites the log as `snapshot()` at the next quiet moment between writes: every acknowledged
   * record has been applied by its writer, and appends wait until the new log is in place.
   */
  requestCompaction(snapshot: () => unknown[] | Promise<unknown[]>): void {
    this.compactWith = snapshot;
    if (!this.flushing) this.flushing = this.flush();
  }

  async close(): Promise<void> {
    while (this.flushing) await this.flushing;
    this.unwatch();
    await this.handle.close();
  }

  private async flush(): Promise<void> {
    // a batch was acknowledged and its writers may not have applied it yet
    let acknowledged = false;
    try {
      while (this.queue.length > 0 || this.probes.length > 0 || this.compactWith) {
        if (this.queue.length > 0) {
          const batch = this.queue;
          this.queue = [];
          const bytes = Buffer.from(batch.map((p) => p.line).join(''));
          try {
            await this.repair();
            this.dirty = true;
            await writeAll(this.handle, bytes);
            await this.handle.datasync();
            this.dirty = false;
          } catch (err) {
            const error = stateUnavailable(new Error(`writing ${this.file}`, { cause: err }));
            this.health?.failed(this.file, err);
            // cut it off before anyone hears of the failure: a restart must not find these records
            await this.repair().catch(() => undefined);
            for (const p of batch) p.reject(error);
            continue;
          }
          this.size += bytes.length;
          this.records += batch.length;
          for (const p of batch) p.resolve();
          acknowledged = true;
        } else if (this.probes.length > 0) {
          const waiting = this.probes;
          this.probes = [];
          try {
            await this.repair();
            this.dirty = true;
            await writeAll(this.handle, PROBE);
            await this.handle.datasync();
            await this.repair();
            for (const p of waiting) p.resolve();
          } catch (err) {
            await this.repair().catch(() => undefined);
            for (const p of waiting) p.reject(new Error(`writing ${this.file}`, { cause: err }));
          }
        } else if (this.compactWith) {
          if (acknowledged) {
            // The writers of the batch just acknowledged apply it to their state in continuations
            // that have not run yet: a snapshot taken now would miss it, and the new log lose it.
            acknowledged = false;
            await new Promise((resolve) => setImmediate(resolve));
            if (this.queue.length > 0) continue;
          }
          const snapshot = this.compactWith;
          this.compactWith = null;
          // a failed compaction leaves a log that holds every acknowledged record; the owner asks again later
          await (async () => this.compact(await snapshot()))().catch(() => undefined);
        }
      }
    } finally {
      this.flushing = null;
    }
  }

  /** Cuts the file back to what was acknowledged (and reopens it when a compaction could not). */
  private async repair(): Promise<void> {
    if (!this.dirty) return;
    if (this.reopen) {
      const old = this.handle;
      this.handle = await open(this.file, 'a+');
      this.reopen = false;
      await old.close().catch(() => undefined);
    }
    await this.handle.truncate(this.size);
    await this.handle.datasync();
    this.dirty = false;
  }

  private async compact(records: unknown[]): Promise<void> {
    const temp = `${this.file}.compact`;
    const bytes = Buffer.from(records.map(encode).join(''));
    try {
      const out = await open(temp, 'w');
      try {
        await writeAll(out, bytes);
        await out.datasync();
      } finally {
        await out.close();
      }
    } catch (err) {
      await rm(temp, { force: true }).catch(() => undefined);
      throw err;
    }
    await rename(temp, this.file);
    // the file is the snapshot from here: appends must go to it, not to the old one's handle
    this.size = bytes.length;
    this.records = records.length;
    this.dirty = true;
    this.reopen = true;
    fsyncDir(path.dirname(this.file));
    await this.repair();
  }
}

/** write() may write less than asked (a disk filling up, a file size limit): the rest, or the error */
async function writeAll(handle: FileHandle, bytes: Buffer): Promise<void> {
  for (let done = 0; done < bytes.length; ) {
    const { bytesWritten } = await handle.write(bytes, done, bytes.length - done);
    if (bytesWritten === 0) throw new Error('the file took no more bytes');
    done += bytesWritten;
  }
}

function encode(record: unknown): string {
  const json = JSON.stringify(record);
  return `${crc32(json).toString(16).padStart(8, '0')} ${json}\n`;
}

function replay(text: string, apply: (record: unknown) => void): { records: number; goodBytes: number; damage: string | null } {
  let offset = 0;
  let records = 0;
  let goodBytes = 0;
  while (offset < text.length) {
    const end = text.indexOf('\n', offset);
    if (end === -1) {
      // An incomplete last line is a torn write, a prefix of a record and its newline. A whole record
      // followed by something other than its newline is not: that newline was damaged.
      const rest = text.slice(offset);
      if (rest.length > 1 && decode(rest.slice(0, -1)) !== undefined) return { records, goodBytes, damage: 'its newline is damaged' };
      break;
    }
    const line = text.slice(offset, end);
    const record = decode(line);
    if (record === undefined) return { records, goodBytes, damage: line.length < 10 || line[8] !== ' ' ? 'not a log record' : 'checksum mismatch' };
    apply(record);
    records++;
    offset = end + 1;
    goodBytes += Buffer.byteLength(line) + 1;
  }
  return { records, goodBytes, damage: null };
}

function decode(line: string): unknown {
  if (line.length < 10 || line[8] !== ' ') return undefined;
  const json = line.slice(9);
  if (crc32(json).toString(16).padStart(8, '0') !== line.slice(0, 8)) return undefined;
  try {
    return JSON.parse(json);
  } catch {
    return undefined;
  }
}

function fsyncDir(dir: string): void {
  // a rename or a new file is durable only once its directory entry is
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
