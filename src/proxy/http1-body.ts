// The body of an HTTP/1.1 answer, read by its framing (RFC 9112 §6.3, §7.1): bytes in, body bytes
// and the body's end out. Pure: no socket, no timers. The answer reader (http1-answer.ts) chooses
// the framing from the head, feeds in what the upstream sends after it, and passes the body on.
//
// Order of operations in push():
// 1. a Content-Length body: bytes go out until `length` are in; the last piece goes with the end,
//    not through data(), so the sink can take it in its end();
// 2. a chunked body: a size line (extensions checked, then ignored), that many bytes, their CRLF, and
//    so on to the last chunk (size 0); then trailer lines, checked as header fields and dropped (a
//    proxy may), up to the empty line. Every line ends in CRLF, as llhttp's strict mode wants; lines may
//    arrive split anywhere; a partial line is held, at most 4 KiB;
// 3. a body delimited by the close: every byte is body, and atClose() ends it;
// 4. at the end, bytes already in beyond the body are reported (`extra`): the connection's framing
//    can no longer be trusted, so it is not reused.
// A malformed chunk size, chunk end or trailer throws UpstreamError('invalid_response').
import { invalid } from './http1-head.ts';

/** How an answer's body ends: after `length` bytes (more than 0), at the last chunk, or at the close. */
export type Framing = { length: number } | 'chunked' | 'close';

export interface BodyEvents {
  /** the next bytes of the body, in order; never empty */
  data(chunk: Buffer): void;
  /** the body is complete; `last`: its final bytes (Content-Length only); `extra`: bytes came after it */
  end(last: Buffer | undefined, extra: boolean): void;
}

const MAX_LINE = 4096;
// RFC 9112 §7.1: chunk-size [ chunk-ext ] CRLF, with llhttp's reading of chunk-ext: `;name[=value]`,
// no whitespace, the value a token (maybe empty) or a quoted-string. Extensions are then ignored.
const TOKEN = "[!#$%&'*+\\-.^_`|~0-9A-Za-z]";
const QUOTED = '"(?:[\\t\\x20\\x21\\x23-\\x5b\\x5d-\\x7e\\x80-\\xff]|\\\\[\\t\\x20-\\x7e\\x80-\\xff])*"';
const VALUE = `(?:${TOKEN}*|${QUOTED})`;
// llhttp also takes an extension with an empty name (`;=v`), though not a bare `;`
const SIZE_LINE = new RegExp(`^0*([0-9a-fA-F]{1,12})(?:;(?:${TOKEN}+(?:=${VALUE})?|=${VALUE}))*\\r$`);
const TRAILER_LINE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*\r$/;

const Step = { Fixed: 0, ChunkSize: 1, ChunkData: 2, ChunkEnd: 3, Trailers: 4, UntilClose: 5, Done: 6 } as const;
type Step = typeof Step[keyof typeof Step];

/** One answer's body. Not to be fed after its end. */
export class BodyReader {
  readonly #events: BodyEvents;
  #step: Step;
  /** bytes left in the body (Content-Length) or in the current chunk */
  #remaining = 0;
  /** the start of a line whose end has not come yet */
  #partial: Buffer | null = null;

  constructor(framing: Framing, events: BodyEvents) {
    this.#events = events;
    if (framing === 'chunked') this.#step = Step.ChunkSize;
    else if (framing === 'close') this.#step = Step.UntilClose;
    else {
      this.#step = Step.Fixed;
      this.#remaining = framing.length;
    }
  }

  push(data: Buffer): void {
    while (data.length > 0) {
      switch (this.#step) {
        case Step.Fixed: {
          const n = this.#remaining;
          if (data.length < n) {
            this.#remaining -= data.length;
            this.#events.data(data);
            return;
          }
          this.#step = Step.Done;
          this.#events.end(data.length === n ? data : data.subarray(0, n), data.length > n);
          return;
        }
        case Step.ChunkSize: {
          const next = this.#nextLine(data);
          if (next === null) return;
          data = next.rest;
          // `0*` keeps leading zeros out of the 12 digits (48 bits, far past any real chunk)
          const size = SIZE_LINE.exec(next.line);
          if (size === null) throw invalid('the upstream sent a malformed chunk size');
          this.#remaining = parseInt(size[1], 16);
          this.#step = this.#remaining === 0 ? Step.Trailers : Step.ChunkData;
          break;
        }
        case Step.ChunkData: {
          const n = this.#remaining;
          if (data.length <= n) {
            this.#remaining -= data.length;
            if (this.#remaining === 0) this.#step = Step.ChunkEnd;
            this.#events.data(data);
            return;
          }
          this.#events.data(data.subarray(0, n));
          data = data.subarray(n);
          this.#remaining = 0;
          this.#step = Step.ChunkEnd;
          break;
        }
        case Step.ChunkEnd: {
          // the line end after a chunk's data (it may arrive split)
          const next = this.#nextLine(data);
          if (next === null) return;
          if (next.line !== '\r') throw invalid('the upstream sent a malformed chunk');
          data = next.rest;
          this.#step = Step.ChunkSize;
          break;
        }
        case Step.Trailers: {
          const next = this.#nextLine(data);
          if (next === null) return;
          data = next.rest;
          if (next.line === '\r') {
            this.#step = Step.Done;
            this.#events.end(undefined, data.length > 0);
            return;
          }
          if (!TRAILER_LINE.test(next.line)) throw invalid('the upstream sent a malformed trailer field');
          break;
        }
        case Step.UntilClose:
          this.#events.data(data);
          return;
        case Step.Done:
          return;
      }
    }
  }

  /** the upstream closed its side: true when that completes the body (framing by the close) */
  atClose(): boolean {
    if (this.#step !== Step.UntilClose) return false;
    this.#step = Step.Done;
    this.#events.end(undefined, false);
    return true;
  }

  /** the next line (without its LF, after what was held of it) and the bytes after it; null: held, incomplete */
  #nextLine(data: Buffer): { line: string; rest: Buffer } | null {
    const nl = data.indexOf(10);
    if (nl === -1) {
      this.#partial = this.#partial ? Buffer.concat([this.#partial, data]) : data;
      if (this.#partial.length > MAX_LINE) throw invalid('the upstream sent a malformed chunked body');
      return null;
    }
    let line = data.toString('latin1', 0, nl);
    if (this.#partial) {
      line = this.#partial.toString('latin1') + line;
      this.#partial = null;
    }
    return { line, rest: data.subarray(nl + 1) };
  }
}
