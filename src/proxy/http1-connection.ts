// One connection to an upstream and the exchange on it (RFC 9112): writes the request (head, then the
// body with Content-Length or chunked framing), reads the answer (head by http1-head.ts, then the body
// by its framing) into the sink with back-pressure, and tells the pool whether it may be reused. The
// rules are listed at the top of http1-client.ts.
import type net from 'node:net';
import type { Readable } from 'node:stream';
import { parseAnswerHead, type HeaderList } from './http1-head.ts';
import { UpstreamError } from './upstream-error.ts';

export type { HeaderList };

export interface Sink {
  write(chunk: Buffer): boolean;
  end(chunk?: Buffer): unknown;
  once(event: 'drain', listener: () => void): unknown;
}

export interface Exchange {
  /** `METHOD path HTTP/1.1\r\n` + header lines, without Host and without the closing empty line */
  head: string;
  method: string;
  /** streamed with chunked framing unless `bodyLength` is given; null: no body */
  body: Readable | null;
  bodyLength?: number;
  /**
   * called once with the answer's status, its header fields, and the Connection header's tokens
   * (lowercased, comma-separated, '' when there is none); may throw to refuse the answer
   */
  onHead(status: number, headers: HeaderList, connection: string): Sink;
  /** the visitor left: abort() ends the exchange without an error (its promise resolves) */
  signal?: { aborted: boolean };
}

export interface ClientOptions {
  timeoutMs: number;
  connectTimeoutMs: number;
  /** connections per origin; more requests wait for one to come free */
  maxConnections: number;
  /** idle connections are closed after this, or earlier when the upstream's Keep-Alive says so */
  idleMs?: number;
}

/** The request an exchange serves, as the connection sees it (the pool's Attempt). */
export interface Attempt {
  exchange: Exchange;
  answered: boolean;
  readonly settled: boolean;
  /** runs the exchange on `conn` (a connection that came free, or a new one) */
  start(conn: Connection): void;
  /** the connection failed before a byte of the answer: true when the request went again */
  retry(conn: Connection): boolean;
  finish(): void;
  fail(err: UpstreamError): void;
}

const MAX_HEAD = 64 * 1024;
const HEAD_END = Buffer.from('\r\n\r\n');

// where the parser is in the current answer
const State = { Head: 0, Fixed: 1, ChunkSize: 2, ChunkData: 3, ChunkEnd: 4, Trailers: 5, UntilClose: 6, Done: 7 } as const;
type State = typeof State[keyof typeof State];

export interface PoolHooks {
  /** a finished exchange: the connection goes to the next waiting request, the idle list, or away */
  release(conn: Connection, reusable: boolean): void;
  /** the connection is gone: its slot comes free */
  forget(conn: Connection): void;
}

export interface Origin {
  key: string;
  host: string;
  port: number;
  secure: boolean;
  servername: string | undefined;
  hostHeader: string;
  idle: Connection[];
  count: number;
  waiting: Attempt[];
}

export class Connection {
  readonly socket: net.Socket;
  readonly origin: Origin;
  /** at least one exchange completed on it */
  reused = false;
  #options: ClientOptions;
  #idleMs: number;
  #keepAliveMs: number;
  #hooks: PoolHooks;
  #connected = false;
  #gone = false;
  #call: Attempt | undefined;
  #sink: Sink | undefined;
  #state: State = State.Done;
  #pending: Buffer | null = null;
  #remaining = 0;
  #keepAlive = true;
  #bodySent = true;
  #received = false;
  #headOnly = false;
  #paused = false;
  #parkedAt = 0;

  constructor(socket: net.Socket, origin: Origin, options: ClientOptions, idleMs: number, hooks: PoolHooks) {
    this.socket = socket;
    this.origin = origin;
    this.#options = options;
    this.#idleMs = idleMs;
    this.#keepAliveMs = idleMs;
    this.#hooks = hooks;
    socket.setTimeout(options.connectTimeoutMs);
    socket.once(origin.secure ? 'secureConnect' : 'connect', () => {
      this.#connected = true;
      // one inactivity timer for the connection's life: an exchange fails after timeoutMs without a
      // byte; an idle connection closes then too, and is not taken past its keep-alive time (usable())
      socket.setTimeout(options.timeoutMs);
    });
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    socket.on('timeout', () => this.#onTimeout());
    socket.on('error', (err: NodeJS.ErrnoException) => this.#onClose(err));
    socket.on('end', () => this.#onEnd());
    socket.on('close', () => this.#onClose(undefined));
  }

  usable(): boolean {
    return !this.#gone && !this.socket.destroyed && this.socket.writable && performance.now() - this.#parkedAt < this.#keepAliveMs;
  }

  /** idle in the pool: never what keeps the process alive */
  park(): void {
    this.#parkedAt = performance.now();
    this.socket.unref();
  }

  release(reusable: boolean): void {
    this.#hooks.release(this, reusable);
  }

  destroy(): void {
    if (this.#gone) return;
    this.#gone = true;
    this.socket.destroy();
    this.#hooks.forget(this);
  }

  begin(call: Attempt): void {
    const { exchange } = call;
    this.#call = call;
    this.#sink = undefined;
    this.#state = State.Head;
    this.#pending = null;
    this.#keepAlive = true;
    this.#received = false;
    this.#headOnly = exchange.method === 'HEAD';
    const socket = this.socket;
    if (this.reused) socket.ref();
    const framing = exchange.body === null ? '' : exchange.bodyLength === undefined ? 'transfer-encoding: chunked\r\n' : `content-length: ${exchange.bodyLength}\r\n`;
    socket.write(`${exchange.head}host: ${this.origin.hostHeader}\r\n${framing}\r\n`, 'latin1');
    if (exchange.body === null) {
      this.#bodySent = true;
      return;
    }
    this.#bodySent = false;
    this.#sendBody(exchange.body, exchange.bodyLength === undefined);
  }

  #sendBody(body: Readable, chunked: boolean): void {
    const socket = this.socket;
    const call = this.#call!;
    const onData = (chunk: Buffer) => {
      if (call.settled || this.#gone) return;
      let ok: boolean;
      if (chunked) {
        if (chunk.length === 0) return;
        socket.cork();
        socket.write(`${chunk.length.toString(16)}\r\n`, 'latin1');
        socket.write(chunk);
        ok = socket.write('\r\n', 'latin1');
        socket.uncork();
      } else {
        ok = socket.write(chunk);
      }
      if (!ok) {
        body.pause();
        socket.once('drain', () => body.resume());
      }
    };
    const onEnd = () => {
      cleanup();
      if (call.settled || this.#gone) return;
      if (chunked) socket.write('0\r\n\r\n', 'latin1');
      this.#bodySent = true;
    };
    const cleanup = () => {
      body.off('data', onData);
      body.off('end', onEnd);
    };
    body.on('data', onData);
    body.on('end', onEnd);
  }

  #onTimeout(): void {
    if (!this.#call) {
      this.destroy();
      return;
    }
    this.#fail(new UpstreamError('timeout', this.#connected ? `the upstream sent nothing for ${this.#options.timeoutMs} ms` : 'connecting to the upstream timed out'));
  }

  #onEnd(): void {
    if (this.#state === State.UntilClose) {
      this.#state = State.Done;
      this.#keepAlive = false;
      this.#finish(undefined);
      return;
    }
    if (this.#call) this.#fail(new UpstreamError('reset', 'the upstream closed the connection before the answer was complete'));
    else this.destroy();
  }

  #onClose(err: NodeJS.ErrnoException | undefined): void {
    if (this.#call) {
      if (this.#state === State.UntilClose && err === undefined) {
        this.#onEnd();
        return;
      }
      this.#fail(classify(err, this.#connected));
    }
    this.destroy();
  }

  #fail(err: UpstreamError): void {
    const call = this.#call;
    this.#call = undefined;
    this.#sink = undefined;
    // the retry connects before this connection lets go of its slot, so it takes the slot rather
    // than a waiting request (which would put the origin one over maxConnections)
    const retried = call !== undefined && !call.settled && !this.#received && call.retry(this);
    this.destroy();
    if (!call || call.settled || retried) return;
    call.fail(err);
  }

  #onData(chunk: Buffer): void {
    const call = this.#call;
    if (!call) {
      // bytes nobody asked for: this connection's framing can no longer be trusted
      this.destroy();
      return;
    }
    this.#received = true;
    if (call.settled) {
      this.destroy();
      return;
    }
    try {
      this.#parse(chunk, call);
    } catch (err) {
      this.#fail(err instanceof UpstreamError ? err : new UpstreamError('other', (err as Error).message, { cause: err }));
    }
  }

  #parse(chunk: Buffer, call: Attempt): void {
    let data = chunk;
    while (data.length > 0 || this.#state === State.Done) {
      switch (this.#state) {
        case State.Head: {
          if (this.#pending) {
            data = Buffer.concat([this.#pending, data]);
            this.#pending = null;
          }
          const end = data.indexOf(HEAD_END);
          if (end === -1) {
            if (data.length > MAX_HEAD) throw new UpstreamError('other', 'the upstream answer head is too large');
            this.#pending = data;
            return;
          }
          if (end > MAX_HEAD) throw new UpstreamError('other', 'the upstream answer head is too large');
          const head = data.toString('latin1', 0, end);
          data = data.subarray(end + 4);
          this.#onHead(head, call);
          if ((this.#state as State) === State.Done) {
            // no body (HEAD, 204, 304, Content-Length: 0): anything after the head is a framing error
            if (data.length > 0) this.#keepAlive = false;
            this.#finish(undefined);
            return;
          }
          break;
        }
        case State.Fixed: {
          const n = this.#remaining;
          if (data.length < n) {
            this.#remaining -= data.length;
            this.#write(data);
            return;
          }
          this.#state = State.Done;
          if (data.length > n) this.#keepAlive = false;
          this.#finish(data.length === n ? data : data.subarray(0, n));
          return;
        }
        case State.ChunkSize: {
          const next = this.#nextLine(data);
          if (next === null) return;
          const { line } = next;
          data = next.rest;
          const semi = line.indexOf(';');
          const hex = (semi === -1 ? line : line.slice(0, semi)).trim();
          if (!/^[0-9a-fA-F]{1,12}$/.test(hex)) throw new UpstreamError('other', 'the upstream sent a malformed chunk size');
          this.#remaining = parseInt(hex, 16);
          this.#state = this.#remaining === 0 ? State.Trailers : State.ChunkData;
          break;
        }
        case State.ChunkData: {
          const n = this.#remaining;
          if (data.length <= n) {
            this.#remaining -= data.length;
            if (this.#remaining === 0) this.#state = State.ChunkEnd;
            this.#write(data);
            return;
          }
          this.#write(data.subarray(0, n));
          data = data.subarray(n);
          this.#remaining = 0;
          this.#state = State.ChunkEnd;
          break;
        }
        case State.ChunkEnd: {
          // the CRLF after a chunk's data (it may arrive split)
          const next = this.#nextLine(data);
          if (next === null) return;
          if (next.line !== '' && next.line !== '\r') throw new UpstreamError('other', 'the upstream sent a malformed chunk');
          data = next.rest;
          this.#state = State.ChunkSize;
          break;
        }
        case State.Trailers: {
          // trailer fields are dropped (a proxy may); the section ends with an empty line
          const next = this.#nextLine(data);
          if (next === null) return;
          data = next.rest;
          if (next.line === '' || next.line === '\r') {
            this.#state = State.Done;
            if (data.length > 0) this.#keepAlive = false;
            this.#finish(undefined);
            return;
          }
          break;
        }
        case State.UntilClose:
          this.#write(data);
          return;
        case State.Done:
          if (data.length > 0) this.destroy();
          return;
      }
    }
  }

  /** the next line (without its LF, with what was stashed before it) and the bytes after it; null: stashed, incomplete */
  #nextLine(data: Buffer): { line: string; rest: Buffer } | null {
    const nl = data.indexOf(10);
    if (nl === -1) {
      this.#stash(data);
      return null;
    }
    return { line: this.#take(data, nl), rest: data.subarray(nl + 1) };
  }

  #stash(data: Buffer): void {
    this.#pending = this.#pending ? Buffer.concat([this.#pending, data]) : data;
    if (this.#pending.length > 4096) throw new UpstreamError('other', 'the upstream sent a malformed chunked body');
  }

  /** the line up to `nl` (exclusive), with whatever was stashed before it */
  #take(data: Buffer, nl: number): string {
    const line = data.toString('latin1', 0, nl);
    if (!this.#pending) return line;
    const whole = this.#pending.toString('latin1') + line;
    this.#pending = null;
    return whole;
  }

  #onHead(head: string, call: Attempt): void {
    const { status, minor, headers, contentLength, encoded, chunked, connection, keepAliveHint } = parseAnswerHead(head);
    if (status < 200) {
      if (status === 101) throw new UpstreamError('other', 'the upstream switched protocols without an upgrade');
      // 100 Continue, 103 Early Hints …: the final answer follows on the same connection
      return;
    }
    this.#keepAlive = minor === 1 ? !/(?:^|[\s,])close\s*,/.test(connection) : /(?:^|[\s,])keep-alive\s*,/.test(connection);
    if (keepAliveHint) {
      const m = /timeout\s*=\s*(\d+)/i.exec(keepAliveHint);
      if (m) this.#keepAliveMs = Math.max(0, Math.min(this.#idleMs, Number(m[1]) * 1000 - 1000));
    }
    if (this.#headOnly || status === 204 || status === 304) {
      this.#state = State.Done;
    } else if (encoded) {
      // Transfer-Encoding wins over Content-Length; the pair smells of smuggling, so no reuse (RFC 9112 §6.3)
      if (contentLength !== -1) this.#keepAlive = false;
      this.#state = chunked ? State.ChunkSize : State.UntilClose;
      if (!chunked) this.#keepAlive = false;
    } else if (contentLength !== -1) {
      this.#remaining = contentLength;
      this.#state = contentLength === 0 ? State.Done : State.Fixed;
    } else {
      this.#state = State.UntilClose;
      this.#keepAlive = false;
    }
    call.answered = true;
    this.#sink = call.exchange.onHead(status, headers, connection);
  }

  #write(data: Buffer): void {
    if (data.length === 0) return;
    const sink = this.#sink!;
    if (!sink.write(data) && !this.#paused) {
      // while the sink is full the upstream is not silent, the visitor is slow: the inactivity timer
      // stops too (the visitor's side has its own timeouts)
      this.#paused = true;
      this.socket.pause();
      this.socket.setTimeout(0);
      sink.once('drain', () => {
        // a finished answer's sink: #complete resumed the connection already
        if (this.#sink === sink) this.#resume();
      });
    }
  }

  #resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    if (this.#gone) return;
    this.socket.setTimeout(this.#options.timeoutMs);
    this.socket.resume();
  }

  #finish(last: Buffer | undefined): void {
    const sink = this.#sink!;
    if (last !== undefined && last.length > 0) sink.end(last);
    else sink.end();
    // an answer before the whole request body went up (an early 413): the connection cannot be reused
    if (!this.#bodySent) this.#keepAlive = false;
    this.#complete();
  }

  #complete(): void {
    const call = this.#call!;
    this.#call = undefined;
    this.#sink = undefined;
    // the answer is read: a sink still full (its visitor may have left, and 'drain' never come) no
    // longer holds the connection, which must read again (its close, the next answer)
    this.#resume();
    const reusable = this.#keepAlive && this.#pending === null && !this.#gone;
    this.reused = true;
    call.finish();
    this.#hooks.release(this, reusable);
  }
}

function classify(err: NodeJS.ErrnoException | undefined, connected: boolean): UpstreamError {
  const code = err?.code ?? '';
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EHOSTUNREACH' || code === 'EAI_AGAIN' || code === 'ENETUNREACH') {
    return new UpstreamError('connect', `the upstream could not be reached (${code})`, { cause: err });
  }
  if (!connected && err && !code.startsWith('ECONN')) return new UpstreamError('connect', `connecting to the upstream failed: ${err.message}`, { cause: err });
  if (code === 'ECONNRESET' || code === 'EPIPE' || err === undefined) return new UpstreamError('reset', 'the upstream closed the connection before the answer was complete', { cause: err });
  return new UpstreamError('other', err.message, { cause: err });
}
