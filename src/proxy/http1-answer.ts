// An upstream's answer on its way to the visitor (RFC 9112): the head found across reads and checked
// as it comes (http1-head.ts), 1xx answers skipped, the final head handed to the exchange, then the
// body by its framing (http1-body.ts) into the sink, with back-pressure on the socket. Apart from the
// connection (http1-connection.ts: the socket's life, the request, the clocks, reuse) so the answer's
// rules read without those. One per connection, begun again for each exchange: nothing is allocated
// per answer that was not before.
import type net from 'node:net';
import { BodyReader, type BodyEvents } from './http1-body.ts';
import { checkPartialHead, invalid, parseAnswerHead, type AnswerHead } from './http1-head.ts';
import type { Attempt, ClientOptions, Sink } from './http1-types.ts';

const MAX_HEAD = 64 * 1024;
const HEAD_END = Buffer.from('\r\n\r\n');
// 100 Continue and 103 Early Hints come a few at a time; more than this is a flood (502), refused
// rather than parsed until the head's deadline
export const MAX_INTERIM = 32;

export interface AnswerEvents {
  /** the final answer's head, before any of its body */
  head(answer: AnswerHead): void;
  /** the whole answer went to the sink; `extra`: bytes came after it */
  done(extra: boolean): void;
}

export class AnswerReader {
  readonly #socket: net.Socket;
  readonly #options: ClientOptions;
  readonly #events: AnswerEvents;
  readonly #bodyEvents: BodyEvents = {
    data: (chunk) => this.#write(chunk),
    end: (last, extra) => this.#end(last, extra),
  };
  #call: Attempt | undefined;
  #sink: Sink | undefined;
  /** the start of an answer head whose end has not come yet */
  #partialHead: Buffer | null = null;
  /** the answer's body; undefined while its head is read, null when it has none */
  #body: BodyReader | null | undefined;
  /** a final answer's head not yet handed to the exchange (see Exchange.onHead for when it is) */
  #head: AnswerHead | null = null;
  #headOnly = false;
  /** 1xx answers read in this exchange */
  #interim = 0;
  #paused = false;
  #stopped = false;

  constructor(socket: net.Socket, options: ClientOptions, events: AnswerEvents) {
    this.#socket = socket;
    this.#options = options;
    this.#events = events;
  }

  begin(call: Attempt): void {
    this.#call = call;
    this.#sink = undefined;
    this.#partialHead = null;
    this.#body = undefined;
    this.#head = null;
    this.#headOnly = call.exchange.method === 'HEAD';
    this.#interim = 0;
  }

  /** the exchange is over: nothing more goes to its sink (a 'drain' from it resumes nothing) */
  detach(): void {
    this.#call = undefined;
    this.#sink = undefined;
  }

  /** the connection is gone: its socket is not resumed any more */
  stop(): void {
    this.#stopped = true;
  }

  /** the final answer's head is not complete yet */
  get readingHead(): boolean {
    return this.#body === undefined;
  }

  /** the sink is full: the socket is paused until it drains */
  get paused(): boolean {
    return this.#paused;
  }

  push(chunk: Buffer, call: Attempt): void {
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

  /** the upstream closed its side: true when that completes the body (framing by the close) */
  atClose(): boolean {
    return this.#body?.atClose() ?? false;
  }

  #onHead(head: string): void {
    const answer = parseAnswerHead(head, this.#headOnly);
    if (answer.status < 200) {
      if (answer.status === 101) throw invalid('the upstream switched protocols without an upgrade');
      if (++this.#interim > MAX_INTERIM) throw invalid(`the upstream sent more than ${MAX_INTERIM} interim (1xx) answers`);
      // 100 Continue, 103 Early Hints …: the final answer follows on the same connection
      return;
    }
    this.#events.head(answer);
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
      this.#socket.pause();
      this.#socket.setTimeout(0);
      sink.once('drain', () => {
        // a finished answer's sink: the connection's #complete resumed it already
        if (this.#sink === sink) this.resume();
      });
    }
  }

  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    if (this.#stopped) return;
    this.#socket.setTimeout(this.#options.timeoutMs);
    this.#socket.resume();
  }

  #end(last: Buffer | undefined, extra: boolean): void {
    if (this.#head !== null) this.#answer(this.#call!);
    const sink = this.#sink!;
    if (last !== undefined && last.length > 0) sink.end(last);
    else sink.end();
    this.#events.done(extra);
  }
}
