// One connection to an upstream and the exchange on it (RFC 9112): writes the request (head, then the
// body by http1-request-body.ts), reads the answer (head by http1-head.ts, then the body by
// http1-body.ts) into the sink with back-pressure, and tells the pool whether it may be reused. The
// rules are listed at the top of http1-client.ts.
//
// An answer read while its exchange is in flight is handled after the turn's reads (after-reads.ts).
// At most one read waits per connection: a second one in the same turn is handled at once, after the
// first, or goes back into the socket when the first filled the visitor's side (back-pressure as
// before). Bytes on an idle connection, end, error, close and timeouts never wait: what waits goes first.
//
// A finished connection is handed over (to a waiting request, or to the idle list) in one place,
// #handOver, and only when every byte read so far belonged to the answer: nothing buffered, nothing
// read after it. An answer completed inside a read (the turn's second read made the first be handled)
// may be followed by more reads in the same turn, which the upstream sent before it could have seen
// another request: the hand-over waits for the end of the turn's reads, and a read meanwhile closes the
// connection (the waiting request then gets a new one). Handed over at once, those bytes were parsed
// as the next visitor's answer.
//
// Two clocks while an exchange is open: the socket's inactivity timer (timeoutMs without a byte, for
// the whole answer), and the head's deadline: the final answer's head, after any 1xx answers, must be
// complete within timeoutMs of the request going up, or of the answer's first byte if that came
// sooner. Without the deadline an upstream trickling one header line at a time held the visitor until
// the visitor's own requestMs; the body has only the inactivity timer (a slow download is fine while
// its bytes move). At most MAX_INTERIM 1xx answers come before the final one (a flood of them is
// refused, not parsed until the deadline).
import type net from 'node:net';
import { afterReads } from '../after-reads.ts';
import { BodyReader, type BodyEvents } from './http1-body.ts';
import { checkPartialHead, invalid, parseAnswerHead, type AnswerHead } from './http1-head.ts';
import { sendRequestBody } from './http1-request-body.ts';
import type { Attempt, ClientOptions, Origin, PoolHooks, Sink } from './http1-types.ts';
import { classify, UpstreamError } from './upstream-error.ts';

export type { Attempt, ClientOptions, Exchange, HeaderList, Origin, PoolHooks, Sink } from './http1-types.ts';

const MAX_HEAD = 64 * 1024;
const HEAD_END = Buffer.from('\r\n\r\n');
// 100 Continue and 103 Early Hints come a few at a time; more than this is a flood (502)
export const MAX_INTERIM = 32;
// methods whose request means to carry content: sent without a body, they say so with
// `content-length: 0` (RFC 9110 §8.6; an upstream may answer 411 otherwise). Go's Transport picks the
// same three; GET, HEAD and the rest go without framing fields
const BODY_METHODS: ReadonlySet<string> = new Set(['POST', 'PUT', 'PATCH']);

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
  /** the start of an answer head whose end has not come yet */
  #partialHead: Buffer | null = null;
  /** the answer's body; undefined while its head is read, null when it has none */
  #body: BodyReader | null | undefined;
  /** a final answer's head not yet handed to the exchange (see Exchange.onHead for when it is) */
  #head: AnswerHead | null = null;
  readonly #bodyEvents: BodyEvents = {
    data: (chunk) => this.#write(chunk),
    end: (last, extra) => {
      if (extra) this.#keepAlive = false;
      this.#finish(last);
    },
  };
  #keepAlive = true;
  #bodySent = true;
  #received = false;
  #headOnly = false;
  /** 1xx answers read in this exchange */
  #interim = 0;
  /** the head's deadline (see the top of the file); null: not armed, or the final head came */
  #deadline: NodeJS.Timeout | null = null;
  #paused = false;
  #parkedAt = 0;
  /** a read waiting for the end of its turn */
  #deferred: Buffer | null = null;
  /** a read is being handled within the read itself: more of the turn's reads may follow */
  #inRead = false;

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
      if (this.#call !== undefined && this.#bodySent) this.#armDeadline();
    });
    socket.on('data', (chunk: Buffer) => this.#onRead(chunk));
    // a read still waiting came before any of these, so it is handled first
    const afterWaiting = <A extends unknown[]>(then: (...args: A) => void) => (...args: A) => {
      this.#takeDeferred();
      then(...args);
    };
    socket.on('timeout', afterWaiting(() => this.#onTimeout()));
    socket.on('error', afterWaiting((err: NodeJS.ErrnoException) => this.#onClose(err)));
    socket.on('end', afterWaiting(() => this.#onEnd()));
    socket.on('close', afterWaiting(() => this.#onClose(undefined)));
  }

  #onRead(chunk: Buffer): void {
    if (this.#deferred === null && this.#call !== undefined) {
      this.#deferred = chunk;
      afterReads(this.#afterReads);
      return;
    }
    this.#inRead = true;
    if (this.#deferred !== null) {
      this.#takeDeferred();
      // the first read filled the visitor's side: this one waits in the paused socket until it drains,
      // as it would have had the first been handled at once
      if (this.#paused && !this.#gone) {
        this.socket.unshift(chunk);
        this.#inRead = false;
        return;
      }
    }
    this.#onData(chunk);
    this.#inRead = false;
  }

  readonly #afterReads = (): void => this.#takeDeferred();

  #takeDeferred(): void {
    const chunk = this.#deferred;
    if (chunk === null) return;
    this.#deferred = null;
    // destroyed meanwhile (its visitor left, the pool closed): nothing reads the answer any more
    if (!this.#gone) this.#onData(chunk);
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
    this.#disarmDeadline();
    if (this.#gone) return;
    this.#gone = true;
    this.socket.destroy();
    this.#hooks.forget(this);
  }

  begin(call: Attempt): void {
    const { exchange } = call;
    this.#call = call;
    this.#sink = undefined;
    this.#partialHead = null;
    this.#body = undefined;
    this.#head = null;
    this.#keepAlive = true;
    this.#received = false;
    this.#headOnly = exchange.method === 'HEAD';
    this.#interim = 0;
    const socket = this.socket;
    if (this.reused) socket.ref();
    const framing = exchange.body === null
      ? (BODY_METHODS.has(exchange.method) ? 'content-length: 0\r\n' : '')
      : exchange.bodyLength === undefined ? 'transfer-encoding: chunked\r\n' : `content-length: ${exchange.bodyLength}\r\n`;
    socket.write(`${exchange.head}host: ${this.origin.hostHeader}\r\n${framing}\r\n`, 'latin1');
    if (exchange.body === null) {
      this.#bodySent = true;
      // a new connection's request goes up once it is connected (connecting has its own timeout)
      if (this.#connected) this.#armDeadline();
      return;
    }
    this.#bodySent = false;
    sendRequestBody(socket, exchange.body, exchange.bodyLength, {
      stopped: () => call.settled || this.#gone,
      sent: () => {
        this.#bodySent = true;
        if (this.#connected && this.#call === call && this.#body === undefined) this.#armDeadline();
      },
      broken: (why) => {
        if (this.#call === call) this.#fail(new UpstreamError('other', why));
      },
    });
  }

  /** starts the head's deadline, once per exchange: a later start (the body sent) does not move it */
  #armDeadline(): void {
    if (this.#deadline !== null) return;
    const call = this.#call;
    this.#deadline = setTimeout(() => {
      this.#deadline = null;
      // a read waiting for the end of its turn came first: it may complete the head
      this.#takeDeferred();
      if (this.#call !== call || this.#body !== undefined) return;
      this.#fail(new UpstreamError('timeout', `the upstream did not complete its answer head within ${this.#options.timeoutMs} ms`));
    }, this.#options.timeoutMs);
  }

  #disarmDeadline(): void {
    if (this.#deadline === null) return;
    clearTimeout(this.#deadline);
    this.#deadline = null;
  }

  #onTimeout(): void {
    if (!this.#call) {
      this.destroy();
      return;
    }
    this.#fail(new UpstreamError('timeout', this.#connected ? `the upstream sent nothing for ${this.#options.timeoutMs} ms` : 'connecting to the upstream timed out'));
  }

  #onEnd(): void {
    // a body read to the close ends here
    if (this.#body?.atClose()) return;
    if (this.#call) this.#fail(new UpstreamError('reset', 'the upstream closed the connection before the answer was complete'));
    else this.destroy();
  }

  #onClose(err: NodeJS.ErrnoException | undefined): void {
    if (this.#call) {
      if (err === undefined && this.#body?.atClose()) return;
      this.#fail(classify(err, this.#connected));
    }
    this.destroy();
  }

  #fail(err: UpstreamError): void {
    const call = this.#call;
    this.#call = undefined;
    this.#sink = undefined;
    this.#disarmDeadline();
    // the retry connects before this connection lets go of its slot, so it takes the slot rather
    // than a waiting request (which would put the origin one over maxConnections). Only a connection
    // that closed is retried: a silent upstream has had its upstreamMs (and may be working on the request)
    const retried = call !== undefined && !call.settled && !this.#received && err.kind !== 'timeout' && call.retry(this);
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
    // an answer under way before the request was all sent (an early 413, or an upstream not reading
    // the body): its head has the same time from here
    if (this.#body === undefined) this.#armDeadline();
    try {
      this.#parse(chunk, call);
    } catch (err) {
      // anything else came from the exchange's onHead: the visitor's side would not take the answer
      this.#fail(err instanceof UpstreamError ? err : new UpstreamError('invalid_response', (err as Error).message, { cause: err }));
    }
  }

  #parse(chunk: Buffer, call: Attempt): void {
    let data = chunk;
    // the head, after any 1xx answers
    while (this.#body === undefined) {
      if (data.length === 0) return;
      // what was checked before, less its last byte (a CR whose LF may be in this read)
      let checked = 0;
      if (this.#partialHead) {
        checked = this.#partialHead.length - 1;
        data = Buffer.concat([this.#partialHead, data]);
        this.#partialHead = null;
      }
      const end = data.indexOf(HEAD_END);
      if (end === -1) {
        if (data.length > MAX_HEAD) throw invalid('the upstream answer head is too large');
        checkPartialHead(data, checked);
        this.#partialHead = data;
        return;
      }
      if (end > MAX_HEAD) throw invalid('the upstream answer head is too large');
      const head = data.toString('latin1', 0, end);
      data = data.subarray(end + 4);
      this.#onHead(head);
    }
    // no body (HEAD, 204, 304, Content-Length: 0): anything after the head is a framing error
    if (this.#body === null) this.#bodyEvents.end(undefined, data.length > 0);
    else this.#body.push(data);
    if (this.#head !== null && !call.settled) this.#answer(call);
  }

  #onHead(head: string): void {
    const answer = parseAnswerHead(head, this.#headOnly);
    if (answer.status < 200) {
      if (answer.status === 101) throw invalid('the upstream switched protocols without an upgrade');
      if (++this.#interim > MAX_INTERIM) throw invalid(`the upstream sent more than ${MAX_INTERIM} interim (1xx) answers`);
      // 100 Continue, 103 Early Hints …: the final answer follows on the same connection
      return;
    }
    this.#disarmDeadline();
    this.#keepAlive = answer.keepAlive;
    // a second before the upstream's own limit, so a request is never sent as it closes
    if (answer.keepAliveTimeout !== -1) this.#keepAliveMs = Math.max(0, Math.min(this.#idleMs, answer.keepAliveTimeout * 1000 - 1000));
    this.#body = answer.framing === null ? null : new BodyReader(answer.framing, this.#bodyEvents);
    this.#head = answer;
  }

  /** hands the head to the exchange: answered from here on, a failure cuts the visitor's answer */
  #answer(call: Attempt): void {
    const { status, headers, connection, length } = this.#head!;
    this.#head = null;
    this.#sink = call.exchange.onHead(status, headers, connection, length);
    call.answered = true;
  }

  #write(data: Buffer): void {
    if (data.length === 0) return;
    if (this.#head !== null) this.#answer(this.#call!);
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
    if (this.#head !== null) this.#answer(this.#call!);
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
    this.reused = true;
    call.finish();
    // inside a read, the turn's next reads are still to come (see the top of the file)
    if (this.#keepAlive && this.#inRead) afterReads(this.#handOver);
    else this.#handOver();
  }

  /**
   * The only hand-over of a finished connection. Reusable when the answer allows it and every byte read
   * so far was the answer's: a read after it closed the connection already (#onData without a call);
   * one still waiting, or bytes back in the socket's buffer (#resume lets them flow only on the next
   * tick), would otherwise become the next exchange's answer. The socket must still carry a request.
   */
  readonly #handOver = (): void => {
    const socket = this.socket;
    const reusable = this.#keepAlive && !this.#gone && this.#deferred === null && socket.readableLength === 0 && !socket.readableEnded && socket.writable;
    this.#hooks.release(this, reusable);
  };
}
