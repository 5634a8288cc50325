// The fallback limiter of a whole instance while Redis is unreachable (`ratelimit.onRedisDown: local`,
// DESIGN §4: limits are then enforced per instance). With `portico serve --workers N` an instance is N
// processes: each worker deciding with its own MemoryLimiter let N times the limit through (120 × 200
// of 150 calls on a free key with 2 workers). So a worker asks the primary (cli/serve.ts), whose one
// MemoryLimiter decides for every worker over the cluster's IPC channel, with the same clock, windows
// and ban policy, and keeps its counts when a worker is replaced.
//
// FailoverLimiter calls this only while its breaker is open: nothing crosses the channel while Redis
// answers. The calls of one turn travel as one message each way (answers leave after the turn's reads,
// as MemoryLimiter's and RedisLimiter's do). A primary that does not answer within `timeoutMs` (the
// Redis command timeout) or a closed channel: the call is decided by this worker's own MemoryLimiter,
// and so are the calls of the next `timeoutMs`, so a stuck primary costs one wait, not one per call.
// One process (no cluster) is the whole instance: its own limiter decides, with no IPC.
// A call carries the worker's `known` (Redis's last decision for the subject, from its FailoverLimiter):
// the primary's limiter continues from the highest count any worker brings.
import cluster, { type Worker } from 'node:cluster';
import { afterReads } from '../after-reads.ts';
import type { BanPolicy, Decision, Limit, RateLimiter } from './limiter.ts';

export const LIMITER_REQUEST = 'portico:limiter-request';
export const LIMITER_RESPONSE = 'portico:limiter-response';

interface Call {
  id: number;
  subject: string;
  limit: Limit;
  ban: BanPolicy;
  nowMs?: number;
  known?: Decision;
}

interface Waiting {
  call: Call;
  resolve(decision: Promise<Decision> | Decision): void;
  /** the message it was sent in, once sent */
  sent?: Sent;
}

/** one message to the primary: its timeout is cleared once every call in it is answered */
interface Sent {
  unanswered: number;
  timer?: ReturnType<typeof setTimeout>;
}

export interface LimiterRequest {
  type: typeof LIMITER_REQUEST;
  calls: Call[];
}

export interface LimiterResponse {
  type: typeof LIMITER_RESPONSE;
  decisions: Array<{ id: number; decision: Decision }>;
}

/** the worker's side of the channel: `process` in a cluster worker */
export interface PrimaryChannel {
  readonly connected: boolean;
  send(message: LimiterRequest, callback: (err: Error | null) => void): boolean;
  on(event: 'message', listener: (message: unknown) => void): unknown;
  off(event: 'message', listener: (message: unknown) => void): unknown;
}

export class InstanceLimiter implements RateLimiter {
  #own: RateLimiter;
  #timeoutMs: number;
  #channel: PrimaryChannel | null;
  #next = 0;
  #waiting = new Map<number, Waiting>();
  #batch: Waiting[] = [];
  /** performance.now() until which calls are not sent (the primary left the last ones unanswered) */
  #ownUntil = 0;
  #onMessage = (message: unknown) => {
    if ((message as { type?: unknown } | null)?.type !== LIMITER_RESPONSE) return;
    for (const { id, decision } of (message as LimiterResponse).decisions) {
      const waiting = this.#waiting.get(id);
      if (!waiting) continue; // already decided here after the timeout
      this.#waiting.delete(id);
      waiting.resolve(decision);
      const sent = waiting.sent;
      if (sent && --sent.unanswered === 0) clearTimeout(sent.timer);
    }
  };

  /** `own`: this process's limiter, for a single process and whenever the primary cannot answer */
  constructor(own: RateLimiter, timeoutMs: number, channel: PrimaryChannel | null = cluster.isWorker ? (process as unknown as PrimaryChannel) : null) {
    this.#own = own;
    this.#timeoutMs = timeoutMs;
    this.#channel = channel;
    channel?.on('message', this.#onMessage);
  }

  consume(subject: string, limit: Limit, ban: BanPolicy, nowMs?: number, known?: Decision): Promise<Decision> {
    if (!this.#channel || !this.#channel.connected || performance.now() < this.#ownUntil) return this.#own.consume(subject, limit, ban, nowMs, known);
    return new Promise((resolve) => {
      const waiting: Waiting = { call: { id: this.#next++, subject, limit, ban, nowMs, known }, resolve };
      if (this.#batch.push(waiting) === 1) afterReads(() => this.#send());
    });
  }

  async close(): Promise<void> {
    this.#channel?.off('message', this.#onMessage);
    this.#channel = null;
    for (const waiting of [...this.#batch, ...this.#waiting.values()]) {
      clearTimeout(waiting.sent?.timer);
      this.#decideHere(waiting);
    }
    this.#batch = [];
    this.#waiting.clear();
    await this.#own.close();
  }

  #send(): void {
    const batch = this.#batch;
    this.#batch = [];
    const channel = this.#channel;
    if (!channel || !channel.connected) {
      for (const waiting of batch) this.#decideHere(waiting);
      return;
    }
    const sent: Sent = { unanswered: batch.length };
    for (const waiting of batch) {
      waiting.sent = sent;
      this.#waiting.set(waiting.call.id, waiting);
    }
    const giveUp = () => {
      clearTimeout(sent.timer);
      let unanswered = false;
      for (const waiting of batch) {
        if (this.#waiting.delete(waiting.call.id)) {
          unanswered = true;
          this.#decideHere(waiting);
        }
      }
      if (unanswered) this.#ownUntil = performance.now() + this.#timeoutMs;
    };
    sent.timer = setTimeout(giveUp, this.#timeoutMs);
    try {
      channel.send({ type: LIMITER_REQUEST, calls: batch.map((w) => w.call) }, (err) => {
        if (err) giveUp();
      });
    } catch {
      // the channel closed between the check and the send
      giveUp();
    }
  }

  #decideHere({ call, resolve }: Waiting): void {
    resolve(this.#own.consume(call.subject, call.limit, call.ban, call.nowMs, call.known));
  }
}

/** The primary's side: decides a worker's calls with the instance's one limiter and answers them together. */
export function answerLimiterRequest(worker: Worker, limiter: RateLimiter, request: LimiterRequest): void {
  // MemoryLimiter decides synchronously in the order asked, so each call stays one atomic step
  const decided = request.calls.map((call) => limiter.consume(call.subject, call.limit, call.ban, call.nowMs, call.known).then((decision) => ({ id: call.id, decision })));
  Promise.all(decided).then(
    (decisions) => {
      // a worker that died meanwhile needs no answer
      if (worker.isConnected()) worker.send({ type: LIMITER_RESPONSE, decisions } satisfies LimiterResponse, () => undefined);
    },
    () => undefined, // unanswered: the worker decides those calls itself after its timeout
  );
}
