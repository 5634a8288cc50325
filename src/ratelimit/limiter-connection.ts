// The limiter's own Redis connection: the one script, pipelined, and nothing else. Every /v1 request
// makes exactly this one call, so its cost is paid per request: through ioredis it took 16–22 µs of
// CPU per call (a Command, a Promise chain and an auto-pipeline batch for each), written straight
// as RESP here about 5 µs (50 callers in parallel, one core).
//
// - Calls made in one turn of the event loop are written together, 32 at most per socket write.
// - Redis answers in order, so the calls waiting for an answer are a queue: the first answer belongs
//   to the oldest call. A call that timed out stays in the queue until its answer arrives and is dropped.
// - One timer for all calls: each call has a deadline (start + commandTimeoutMs, whatever it waits
//   for: the connection, the write, Redis), and the timer is armed for the oldest deadline not yet
//   passed. No request waits longer than the timeout, and there is no timer per call.
// - EVALSHA; the script is loaded when the connection opens, and a NOSCRIPT answer (SCRIPT FLUSH, a
//   failover to a replica without it) resends that call as EVAL.
// - When the connection breaks, its waiting calls fail at once and it is opened again in the
//   background; a call arriving meanwhile opens it at once instead of waiting for the backoff.
import type net from 'node:net';
import { createHash } from 'node:crypto';
import { afterReads } from '../after-reads.ts';
import { bulk, INCOMPLETE, ReplyError, ReplyReader, type Reply } from './resp.ts';
import { openSocket, setupCommands, type LimiterConnectionOptions } from './limiter-socket.ts';

interface Pending {
  /** the script call's RESP after the script name (numkeys, keys, args); null: a setup command */
  args: string | null;
  argCount: number;
  deadline: number;
  settled: boolean;
  /** sent after an ASKING, which its resend with the script needs again (ASKING holds for one command) */
  asking?: boolean;
  resolve(reply: Reply): void;
  reject(err: Error): void;
}

type State = 'idle' | 'connecting' | 'ready' | 'closed';

/** calls waiting for an answer (timed out ones included) before new calls are refused */
const MAX_IN_FLIGHT = 10_000;
/** calls that go to Redis at once instead of waiting for the end of this turn (see #write) */
const FLUSH_AT = 32;

export class LimiterConnection {
  readonly #options: LimiterConnectionOptions;
  readonly #script: string;
  readonly #evalsha: string;
  readonly #eval: string;
  #state: State = 'idle';
  #socket: net.Socket | null = null;
  /** [#head, length): calls written or to be written, in order */
  #queue: Pending[] = [];
  #head = 0;
  /** the timer has checked every call before this index */
  #checked = 0;
  #timer: NodeJS.Timeout | null = null;
  #check: NodeJS.Immediate | null = null;
  #out = '';
  #flushScheduled = false;
  #unflushed = 0;
  readonly #replies = new ReplyReader();
  #failures = 0;
  #reconnectTimer: NodeJS.Timeout | null = null;

  constructor(options: LimiterConnectionOptions, script: string) {
    this.#options = options;
    this.#script = script;
    const sha = createHash('sha1').update(script).digest('hex');
    this.#evalsha = `$7\r\nEVALSHA\r\n$40\r\n${sha}\r\n`;
    this.#eval = `$4\r\nEVAL\r\n${bulk(script)}`;
    this.#connect();
  }

  /**
   * Runs the script. `args` is the RESP of numkeys, the keys and the arguments (see bulk()), `argCount`
   * how many bulk strings it holds. Rejects with code REDIS_TIMEOUT past the timeout, REDIS_CONNECTION
   * when there is no connection, REDIS_REPLY_ERROR when Redis answers an error.
   */
  run(args: string, argCount: number): Promise<Reply> {
    return new Promise<Reply>((resolve, reject) => {
      if (this.#state === 'closed') return reject(connectionError('the limiter connection is closed'));
      if (this.#queue.length - this.#head >= MAX_IN_FLIGHT) return reject(timeoutError(`${MAX_IN_FLIGHT} rate limit calls are waiting for Redis`));
      if (this.#state === 'idle') this.#connect();
      const timeout = this.#options.commandTimeoutMs;
      const pending: Pending = { args, argCount, deadline: timeout === undefined ? Infinity : performance.now() + timeout, settled: false, resolve, reject };
      this.#queue.push(pending);
      this.#write(`*${argCount + 2}\r\n${this.#evalsha}${args}`);
      if (this.#timer === null && this.#check === null && timeout !== undefined) this.#arm(timeout);
    });
  }

  /**
   * The same as run(), for a call redirected here (limiter-nodes.ts): it keeps the first attempt's
   * `deadline`, and with `asking` goes after an ASKING (a Cluster slot being migrated to this node).
   */
  retry(args: string, argCount: number, deadline: number, asking: boolean): Promise<Reply> {
    return new Promise<Reply>((resolve, reject) => {
      if (this.#state === 'closed') return reject(connectionError('the limiter connection is closed'));
      if (this.#state === 'idle') this.#connect();
      if (asking) this.#asking();
      this.#queue.push({ args, argCount, deadline, settled: false, asking, resolve, reject });
      this.#write(`*${argCount + 2}\r\n${this.#evalsha}${args}`);
      const timeout = deadline - performance.now();
      if (this.#timer === null && this.#check === null && Number.isFinite(timeout)) this.#arm(Math.max(1, timeout));
    });
  }

  /** ASKING, whose +OK nobody waits for */
  #asking(): void {
    this.#queue.push({ args: null, argCount: 0, deadline: Infinity, settled: false, resolve: () => undefined, reject: () => undefined });
    this.#write('*1\r\n$6\r\nASKING\r\n');
  }

  close(): void {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    if (this.#reconnectTimer) clearTimeout(this.#reconnectTimer);
    this.#socket?.destroy();
    this.#failAll(connectionError('the limiter connection is closed'));
  }

  #connect(): void {
    if (this.#reconnectTimer) {
      clearTimeout(this.#reconnectTimer);
      this.#reconnectTimer = null;
    }
    const socket = openSocket(this.#options);
    this.#socket = socket;
    this.#state = 'connecting';
    this.#replies.clear();
    socket.once(this.#options.tls ? 'secureConnect' : 'connect', () => {
      if (this.#socket !== socket) return;
      socket.setTimeout(0);
      this.#state = 'ready';
      // The setup goes before the calls queued while connecting: Redis runs them in this order.
      let text = '';
      const entries: Pending[] = [];
      for (const { text: command, required } of setupCommands(this.#options, this.#script)) {
        text += command;
        entries.push({
          args: null, argCount: 0, deadline: Infinity, settled: false,
          resolve: (reply) => { if (required && reply instanceof ReplyError) socket.destroy(); },
          reject: () => undefined,
        });
      }
      this.#checked = Math.max(this.#checked, this.#head) + entries.length;
      this.#queue.splice(this.#head, 0, ...entries);
      this.#out = text + this.#out;
      this.#flush();
    });
    socket.on('data', (chunk: Buffer) => this.#onData(socket, chunk));
    socket.on('error', () => undefined);
    socket.once('close', () => {
      if (this.#socket !== socket) return;
      this.#socket = null;
      this.#out = '';
      this.#failAll(connectionError('the connection to Redis closed'));
      if (this.#state === 'closed') return;
      this.#state = 'idle';
      this.#failures++;
      const delay = Math.min(50 * this.#failures, 1000);
      this.#reconnectTimer = setTimeout(() => this.#connect(), delay);
      this.#reconnectTimer.unref();
    });
  }

  #write(text: string): void {
    this.#out += text;
    if (this.#state !== 'ready') return;
    // A long burst of requests read in one turn would keep Redis idle until the last of them is
    // parsed, and this process idle later while Redis works through the whole batch: /v1 under 50
    // keep-alive connections ran at ~84 % CPU. Sending every FLUSH_AT calls at once overlaps the
    // two (99 % CPU, ~1.2× the requests per second; every 4 calls, or each call, cost more CPU per
    // request than the turn's single write).
    if (++this.#unflushed >= FLUSH_AT) {
      this.#flush();
      return;
    }
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    // after the other reads of this turn: their calls join this write
    afterReads(() => this.#flush());
  }

  #flush(): void {
    this.#unflushed = 0;
    this.#flushScheduled = false;
    if (this.#out === '' || this.#state !== 'ready') return;
    this.#socket!.write(this.#out);
    this.#out = '';
  }

  #onData(socket: net.Socket, chunk: Buffer): void {
    this.#replies.push(chunk);
    for (;;) {
      let reply: Reply | typeof INCOMPLETE;
      try {
        reply = this.#replies.next();
      } catch {
        // not RESP: nothing after this point can be trusted
        this.#socket?.destroy();
        return;
      }
      if (reply === INCOMPLETE) return;
      this.#answer(reply);
      if (socket.destroyed) return;
    }
  }

  #answer(reply: Reply): void {
    if (this.#head >= this.#queue.length) {
      // an answer nobody asked for: the connection is out of step
      this.#socket?.destroy();
      return;
    }
    const pending = this.#queue[this.#head];
    this.#queue[this.#head++] = undefined as unknown as Pending;
    if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
      this.#queue.splice(0, this.#head);
      this.#checked = Math.max(0, this.#checked - this.#head);
      this.#head = 0;
    }
    if (pending.settled) return;
    if (reply instanceof ReplyError && pending.args !== null && reply.message.startsWith('NOSCRIPT')) {
      // the same call again, with the script itself; it keeps its deadline (and, redirected here by
      // -ASK, its ASKING: without it the new owner of a slot being moved answers -MOVED back)
      if (pending.asking) this.#asking();
      this.#queue.push(pending);
      this.#write(`*${pending.argCount + 2}\r\n${this.#eval}${pending.args}`);
      return;
    }
    pending.settled = true;
    if (pending.args === null) pending.resolve(reply);
    else if (reply instanceof ReplyError) pending.reject(reply);
    else {
      this.#failures = 0;
      pending.resolve(reply);
    }
  }

  #arm(ms: number): void {
    // The check runs after the next poll for I/O: when this process itself was held up (a long GC,
    // a busy CPU), answers that arrived meanwhile are read first, and only calls still unanswered
    // then fail. Otherwise the timer phase, which comes first, would fail calls whose answers are
    // already waiting in the socket, and the breaker would take a healthy Redis for a dead one.
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#check = setImmediate(() => {
        this.#check = null;
        this.#expire();
      });
    }, Math.max(1, Math.ceil(ms)));
    this.#timer.unref();
  }

  // Deadlines grow along the queue (a NOSCRIPT resend is the exception, and is caught at the next check).
  #expire(): void {
    const now = performance.now();
    let i = Math.max(this.#checked, this.#head);
    for (; i < this.#queue.length; i++) {
      const pending = this.#queue[i];
      if (pending.settled || pending.args === null) continue;
      if (pending.deadline > now) break;
      pending.settled = true;
      pending.reject(timeoutError(`rate limit call to Redis took longer than ${this.#options.commandTimeoutMs} ms`));
    }
    this.#checked = i;
    if (i < this.#queue.length && this.#queue[i].deadline !== Infinity) this.#arm(this.#queue[i].deadline - now);
  }

  #failAll(err: Error): void {
    const queue = this.#queue;
    const head = this.#head;
    this.#queue = [];
    this.#head = 0;
    this.#checked = 0;
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#check) clearImmediate(this.#check);
    this.#timer = null;
    this.#check = null;
    for (let i = head; i < queue.length; i++) {
      const pending = queue[i];
      if (pending.settled) continue;
      pending.settled = true;
      pending.reject(err);
    }
  }
}

function timeoutError(message: string): Error {
  return Object.assign(new Error(message), { code: 'REDIS_TIMEOUT' });
}

function connectionError(message: string): Error {
  return Object.assign(new Error(message), { code: 'REDIS_CONNECTION' });
}
