// A durable append-only log of JSON records, one per line: `<crc32 hex> <json>\n`.
// - append() resolves only after the record is written and fdatasync'ed. Appends that arrive while a
//   write is in flight are grouped into the next write (group commit): one fsync serves many.
// - open() replays every record; a torn tail (crash mid-write: partial line or bad checksum on the
//   last line) is cut off, since it was never acknowledged. Damage before the tail is refused, not
//   skipped, so nothing acknowledged is silently lost.
// - compact() replaces the file with a snapshot (write temp, fsync, rename, fsync dir).
import { open, rename, readFile, type FileHandle } from 'node:fs/promises';
import { openSync, closeSync, fsyncSync } from 'node:fs';
import path from 'node:path';
import { crc32 } from 'node:zlib';

interface Pending {
  line: string;
  resolve: () => void;
  reject: (err: Error) => void;
}

export class AppendLog {
  readonly file: string;
  private handle: FileHandle;
  private queue: Pending[] = [];
  private flushing: Promise<void> | null = null;
  private broken: Error | null = null;
  private compactWith: (() => unknown[] | Promise<unknown[]>) | null = null;
  /** records written since the last snapshot; the owner uses it to decide when to compact */
  records = 0;

  private constructor(file: string, handle: FileHandle, records: number) {
    this.file = file;
    this.handle = handle;
    this.records = records;
  }

  static async open(file: string, apply: (record: unknown) => void): Promise<AppendLog> {
    let text = '';
    try {
      text = await readFile(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new Error(`reading ${file}`, { cause: err });
    }
    const { records, goodBytes, damage } = replay(text, apply);
    if (damage !== null) throw new Error(`${file}: record ${records + 1} is damaged before the end of the log (${damage}); refusing to start`);
    const handle = await open(file, 'a+');
    if (goodBytes < Buffer.byteLength(text)) {
      // torn tail from a crash: it was never acknowledged, so dropping it loses nothing
      await handle.truncate(goodBytes);
      await handle.datasync();
    }
    fsyncDir(path.dirname(file));
    return new AppendLog(file, handle, records);
  }

  append(record: unknown): Promise<void> {
    if (this.broken) return Promise.reject(this.broken);
    const line = encode(record);
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ line, resolve, reject });
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
    await this.handle.close();
  }

  private async flush(): Promise<void> {
    // a batch was acknowledged and its writers may not have applied it yet
    let acknowledged = false;
    try {
      while (this.queue.length > 0 || this.compactWith) {
        if (this.queue.length > 0) {
          const batch = this.queue;
          this.queue = [];
          try {
            await this.handle.write(batch.map((p) => p.line).join(''));
            await this.handle.datasync();
            this.records += batch.length;
            for (const p of batch) p.resolve();
            acknowledged = true;
          } catch (err) {
            // the state in memory may now be ahead of the disk: refuse every further write
            this.broken = new Error(`writing ${this.file}`, { cause: err });
            for (const p of [...batch, ...this.queue]) p.reject(this.broken);
            this.queue = [];
            this.compactWith = null;
            return;
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
          await (async () => this.compact(await snapshot()))().catch(() => undefined);
        }
      }
    } finally {
      this.flushing = null;
    }
  }

  private async compact(records: unknown[]): Promise<void> {
    const temp = `${this.file}.compact`;
    const out = await open(temp, 'w');
    try {
      await out.write(records.map(encode).join(''));
      await out.datasync();
    } finally {
      await out.close();
    }
    await rename(temp, this.file);
    fsyncDir(path.dirname(this.file));
    const old = this.handle;
    this.handle = await open(this.file, 'a+');
    this.records = records.length;
    await old.close();
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
    if (end === -1) break; // partial last line: torn
    const line = text.slice(offset, end);
    const record = decode(line);
    if (record === undefined) {
      const isLast = text.indexOf('\n', end + 1) === -1;
      if (isLast) break;
      return { records, goodBytes, damage: 'checksum mismatch' };
    }
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
