// RESP2, the little the limiter connection speaks: commands written as text (bulk()), replies read
// from the socket's chunks as they come (ReplyReader). A reply may end in a later chunk than it
// began in; the reader keeps what it could not finish and starts there with the next chunk.
//
// https://redis.io/docs/latest/develop/reference/protocol-spec/ — `+` simple string, `-` error,
// `:` integer, `$` bulk string ($-1: null), `*` array (*-1: null).

export type Reply = number | string | null | ReplyError | Reply[];

/** An error answer from Redis (`-ERR …`), as a value. */
export class ReplyError extends Error {
  readonly code = 'REDIS_REPLY_ERROR';
}

/** next() has no whole reply yet: push() the next chunk. */
export const INCOMPLETE = Symbol('incomplete');

const CR = 13;

/** One RESP bulk string. */
export function bulk(value: string): string {
  return `$${Buffer.byteLength(value)}\r\n${value}\r\n`;
}

export class ReplyReader {
  /** unread bytes start at #at; null: nothing unread */
  #buf: Buffer | null = null;
  #at = 0;

  push(chunk: Buffer): void {
    this.#buf = this.#buf === null ? chunk : Buffer.concat([this.#buf.subarray(this.#at), chunk]);
    this.#at = 0;
  }

  /** The next whole reply, or INCOMPLETE. Throws on bytes that are not RESP (the stream is lost then). */
  next(): Reply | typeof INCOMPLETE {
    const buf = this.#buf;
    if (buf === null) return INCOMPLETE;
    const reply = this.#parse(buf);
    if (reply !== INCOMPLETE && this.#at >= buf.length) this.clear();
    return reply;
  }

  /** Forgets what was unread (a new connection starts clean). */
  clear(): void {
    this.#buf = null;
    this.#at = 0;
  }

  // On INCOMPLETE #at is back where this reply began.
  #parse(buf: Buffer): Reply | typeof INCOMPLETE {
    const start = this.#at;
    if (start >= buf.length) return INCOMPLETE;
    let end = start + 1;
    while (end < buf.length && buf[end] !== CR) end++;
    if (end + 1 >= buf.length) return INCOMPLETE;
    const type = buf[start];
    this.#at = end + 2;
    switch (type) {
      case 0x3a: // :
        return integer(buf, start + 1, end);
      case 0x2b: // +
        return buf.toString('utf8', start + 1, end);
      case 0x2d: // -
        return new ReplyError(buf.toString('utf8', start + 1, end));
      case 0x24: { // $
        const length = integer(buf, start + 1, end);
        if (length < 0) return null;
        if (this.#at + length + 2 > buf.length) {
          this.#at = start;
          return INCOMPLETE;
        }
        const text = buf.toString('utf8', this.#at, this.#at + length);
        this.#at += length + 2;
        return text;
      }
      case 0x2a: { // *
        const count = integer(buf, start + 1, end);
        if (count < 0) return null;
        const items: Reply[] = new Array(count);
        for (let i = 0; i < count; i++) {
          const item = this.#parse(buf);
          if (item === INCOMPLETE) {
            this.#at = start;
            return INCOMPLETE;
          }
          items[i] = item;
        }
        return items;
      }
      default:
        this.#at = start;
        throw new Error(`unexpected RESP type byte ${type}`);
    }
  }
}

function integer(buf: Buffer, from: number, to: number): number {
  let negative = false;
  let i = from;
  if (buf[i] === 0x2d) {
    negative = true;
    i++;
  }
  if (i === to) throw new Error('malformed RESP integer');
  let n = 0;
  for (; i < to; i++) {
    const digit = buf[i] - 0x30;
    if (digit < 0 || digit > 9) throw new Error('malformed RESP integer');
    n = n * 10 + digit;
  }
  return negative ? -n : n;
}
