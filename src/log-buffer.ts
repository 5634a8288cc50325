// Where log lines go: a file descriptor (stdout unless told), written ~16 KB at a time and at least
// every 250 ms, synchronously, in the order the lines came.
//
// Each line is encoded into one reusable buffer as it arrives. Gathering the lines as one growing
// string instead (`pending += line`, then Buffer.from at the flush) kept ~60 lines of concatenated
// pieces alive across young-generation collections and walked them twice at the flush: the access
// line was ~37k of a /v1 call's ~229k instructions (callgrind), and is ~3k now.
//
// Why not pino.destination (sonic-boom): with `minLength` it measures the byte length of the whole
// pending chunk on every line, and async writes hand each chunk to the libuv pool; together they were
// a third of a /v1 call's CPU under load. Synchronous, as pino's default is: a stdout pipe nobody
// reads stalls the process (as it does any pino app); a reader that is merely slow (EAGAIN on a
// non-blocking pipe) is waited for; a write that fails (EPIPE, ENOSPC) costs that chunk, never the
// process.
import { writeSync as fsWriteSync } from 'node:fs';

export interface LogBufferOptions {
  /** bytes gathered before a write */
  minBytes?: number;
  /** the longest a line waits, in ms (0: no timer) */
  maxDelayMs?: number;
  /** fs.writeSync, or a stand-in in unit tests */
  writeSync?: (fd: number, buffer: Buffer, offset: number, length: number) => number;
}

const sleepCell = new Int32Array(new SharedArrayBuffer(4));

export class LogBuffer {
  readonly #fd: number;
  readonly #minBytes: number;
  readonly #writeSync: NonNullable<LogBufferOptions['writeSync']>;
  /** [0, #used): the encoded lines not written yet */
  readonly #buffer: Buffer;
  #used = 0;

  constructor(fd: number, options: LogBufferOptions = {}) {
    this.#fd = fd;
    this.#minBytes = options.minBytes ?? 16_000;
    // room for a full batch and the longest line that crosses it, at 3 bytes per UTF-16 unit
    this.#buffer = Buffer.allocUnsafe(Math.max(64 * 1024, this.#minBytes * 4));
    this.#writeSync = options.writeSync ?? fsWriteSync;
    const delay = options.maxDelayMs ?? 250;
    // it lives as long as the process: the timer never stops, and never keeps the process alive
    if (delay > 0) setInterval(() => this.flushSync(), delay).unref();
  }

  /** Takes one or more whole lines; returns true (there is no back-pressure: the write is synchronous). */
  write(lines: string): boolean {
    // a UTF-16 unit is at most 3 bytes of UTF-8: never encode a line that might not fit whole
    if (this.#used + lines.length * 3 > this.#buffer.length) {
      this.flushSync();
      if (lines.length * 3 > this.#buffer.length) {
        this.#writeAll(Buffer.from(lines));
        return true;
      }
    }
    this.#used += this.#buffer.write(lines, this.#used, 'utf8');
    if (this.#used >= this.#minBytes) this.flushSync();
    return true;
  }

  /** Writes what is pending now. */
  flushSync(): void {
    if (this.#used === 0) return;
    const length = this.#used;
    this.#used = 0;
    this.#writeAll(this.#buffer.subarray(0, length));
  }

  /** pino's logger.flush(cb) calls this. */
  flush(cb?: (err?: Error) => void): void {
    this.flushSync();
    cb?.();
  }

  #writeAll(chunk: Buffer): void {
    let offset = 0;
    while (offset < chunk.length) {
      try {
        offset += this.#writeSync(this.#fd, chunk, offset, chunk.length - offset);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EAGAIN') {
          Atomics.wait(sleepCell, 0, 0, 1);
          continue;
        }
        // EPIPE, EBADF, ENOSPC…: there is nowhere to say so; this chunk is dropped, the next is tried
        return;
      }
    }
  }
}
