// One connection to an upstream and the exchange on it (RFC 9112): writes the request (head by
// http1-request-head.ts, then the body by http1-request-body.ts), has the answer read into the sink
// with back-pressure (http1-answer.ts), and tells the pool whether it may be reused. The rules are
// listed at the top of http1-client.ts.
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
// its bytes move).
import type net from 'node:net';
import { afterReads } from '../after-reads.ts';
import { AnswerReader, type AnswerEvents } from './http1-answer.ts';
import { sendRequestBody } from './http1-request-body.ts';
import { requestHead } from './http1-request-head.ts';
import type { Attempt, ClientOptions, Origin, PoolHooks } from './http1-types.ts';
import { classify, UpstreamError } from './upstream-error.ts';

export { MAX_INTERIM } from './http1-answer.ts';
export type { Attempt, ClientOptions, Exchange, HeaderList, Origin, PoolHooks, Sink } from './http1-types.ts';

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
  readonly #answerReader: AnswerReader;
  readonly #answerEvents: AnswerEvents = {
    head: (answer) => {
      this.#disarmDeadline();
      this.#keepAlive = answer.keepAlive;
      // a second before the upstream's own limit, so a request is never sent as it closes
      if (answer.keepAliveTimeout !== -1) this.#keepAliveMs = Math.max(0, Math.min(this.#idleMs, answer.keepAliveTimeout * 1000 - 1000));
    },
    done: (extra) => {
      if (extra) this.#keepAlive = false;
      // an answer before the whole request body went up (an early 413): the connection cannot be reused
      if (!this.#bodySent) this.#keepAlive = false;
      this.#complete();
    },
  };
  #keepAlive = true;
  #bodySent = true;
  #received = false;
  /** the head's deadline (see the top of the file); null: not armed, or the final head came */
  #deadline: NodeJS.Timeout | null = null;
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
    this.#answerReader = new AnswerReader(socket, options, this.#answerEvents);
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
      if (this.#answerReader.paused && !this.#gone) {
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
    this.#answerReader.stop();
    this.socket.destroy();
    this.#hooks.forget(this);
  }

  begin(call: Attempt): void {
    const { exchange } = call;
    this.#call = call;
    this.#answerReader.begin(call);
    this.#keepAlive = true;
    this.#received = false;
    const socket = this.socket;
    if (this.reused) socket.ref();
    socket.write(requestHead(exchange, this.origin.hostHeader), 'latin1');
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
        if (this.#connected && this.#call === call && this.#answerReader.readingHead) this.#armDeadline();
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
      if (this.#call !== call || !this.#answerReader.readingHead) return;
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
    if (this.#answerReader.atClose()) return;
    if (this.#call) this.#fail(new UpstreamError('reset', 'the upstream closed the connection before the answer was complete'));
    else this.destroy();
  }

  #onClose(err: NodeJS.ErrnoException | undefined): void {
    if (this.#call) {
      if (err === undefined && this.#answerReader.atClose()) return;
      this.#fail(classify(err, this.#connected));
    }
    this.destroy();
  }

  #fail(err: UpstreamError): void {
    const call = this.#call;
    this.#call = undefined;
    this.#answerReader.detach();
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
    if (this.#answerReader.readingHead) this.#armDeadline();
    try {
      this.#answerReader.push(chunk, call);
    } catch (err) {
      // anything else came from the exchange's onHead: the visitor's side would not take the answer
      this.#fail(err instanceof UpstreamError ? err : new UpstreamError('invalid_response', (err as Error).message, { cause: err }));
    }
  }

  #complete(): void {
    const call = this.#call!;
    this.#call = undefined;
    this.#answerReader.detach();
    // the answer is read: a sink still full (its visitor may have left, and 'drain' never come) no
    // longer holds the connection, which must read again (its close, the next answer)
    this.#answerReader.resume();
    this.reused = true;
    call.finish();
    // inside a read, the turn's next reads are still to come (see the top of the file)
    if (this.#keepAlive && this.#inRead) afterReads(this.#handOver);
    else this.#handOver();
  }

  /**
   * The only hand-over of a finished connection. Reusable when the answer allows it and every byte read
   * so far was the answer's: a read after it closed the connection already (#onData without a call);
   * one still waiting, or bytes back in the socket's buffer (the resume() in #complete lets them flow
   * only on the next tick), would otherwise become the next exchange's answer. The socket must still
   * carry a request.
   */
  readonly #handOver = (): void => {
    const socket = this.socket;
    const reusable = this.#keepAlive && !this.#gone && this.#deferred === null && socket.readableLength === 0 && !socket.readableEnded && socket.writable;
    this.#hooks.release(this, reusable);
  };
}
