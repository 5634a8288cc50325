// Redis first; when Redis fails, answer locally (`ratelimit.onRedisDown: local`, limits then hold
// per instance) or refuse to decide (`closed`, the caller answers 503). DESIGN §4: recovery needs no
// restart, so a circuit breaker lets one probe through every `breakerMs` and closes on success.
// With `probeInBackground` that probe is the limiter's own, made on a timer: requests never wait for
// it, and `redisUp` (the portico_redis_up gauge, the "Redis is back" log line) follows Redis also when
// no request comes (it stayed 0 after a freeze until the next /v1 request).
// Answered locally, a subject continues from the counts (and ban) of Redis's last decision for it, kept
// here per subject: the local limiter knows nothing of what Redis counted, and starting from 0 let one
// timed-out call on a slow Redis open a whole second limit (1208–1658 × 200 of 3000 calls at once on a
// 1000/min key). The calls that were on their way to Redis when it failed are counted in both; what is
// allowed here is not added to Redis when it is back (the script is the only writer of its counts).
// A primary that knows calls now go elsewhere (RedisLimiter on Sentinel: a failover announced) says so
// through `onReroute`: the breaker's wait was for the server left behind, so Redis is tried at once. In a
// planned switchover the limiter answered locally for up to a second after +switch-master (its next probe).
// One breaker per server: a primary that names the server a subject's calls go to (`nodeOf`: on a Cluster
// the primary owning its slot) has a breaker opened for that server only. With one breaker for all, one
// Cluster primary's death answered every /v1 call without Redis for its failover (with
// `onRedisDown: closed`, 503 for every subject, not only for the third of them on that primary).
import type { BanPolicy, Decision, Limit, RateLimiter } from './limiter.ts';

/** the background probe's own counters (`portico:rl:{portico:probe}`, `…{portico:probe:N}`), never refused */
const PROBE_SUBJECT = 'portico:probe';
/** how many `portico:probe:N` are tried to find one whose calls go to a given server */
const PROBE_SEARCH_MAX = 20_000;
const PROBE_LIMIT: Limit = { perMinute: 1e9, perDay: 1e12 };
const PROBE_BAN: BanPolicy = { refusals: 1e9, windowSeconds: 1, banSeconds: 1 };
/**
 * subjects whose last decision is kept, per generation: client IPs are subjects too, so when one
 * generation is full the next starts, and the one before it is dropped
 */
const KNOWN_MAX = 10_000;

export interface FailoverOptions {
  mode: 'local' | 'closed';
  /** how long Redis is not called at all after a failure; default 1000 */
  breakerMs?: number;
  onRedisState?(up: boolean): void;
  onCommandError?(err: unknown): void;
  /**
   * true when another user of the same Redis saw a command time out a moment ago (the request's own
   * state read, most often): the call is answered without Redis, as while the breaker is open, instead
   * of waiting out a second timeout for the same request
   */
  redisStalled?(): boolean;
  /**
   * while a breaker is open, probe every `breakerMs` on a timer instead of through a request. Without
   * it a breaker closes only through a request's probe: with a primary that has `nodeOf`, a server no
   * subject goes to any more would keep its breaker (and `redisUp` false), so Portico always sets it
   */
  probeInBackground?: boolean;
}

export type RedisDownError = Error & { code: 'REDIS_DOWN' };

/** a primary that tells when calls go to another server, or may work again, without a failure seen */
interface Rerouting {
  onReroute?(listener: () => void): void;
  /** the server `subject`'s calls go to now ("host:port"; '' while none is known) */
  nodeOf?(subject: string): string;
}

/** an open breaker: the server it guards is not called until `openUntil`, then probed once */
interface Breaker {
  node: string;
  /** performance.now() until which the server is not called; then half-open */
  openUntil: number;
  probing: boolean;
  timer: NodeJS.Timeout | null;
}

export class FailoverLimiter implements RateLimiter {
  #primary: RateLimiter;
  #local: RateLimiter;
  #opts: FailoverOptions;
  #breakerMs: number;
  #up = true;
  // server → its breaker, while open: until `openUntil` that server is not called, then half-open:
  // exactly one request probes it while the others keep being answered without Redis (with
  // `probeInBackground`: the timer's probe, and every request is answered without Redis). A closed
  // breaker is no entry, so while Redis answers this map is empty and costs one size check.
  #open = new Map<string, Breaker>();
  // server → a probe subject whose calls go there
  #probeSubjects = new Map<string, string>();
  #closed = false;
  /** how many times the primary was rerouted: a call made before the last one failed on a server left behind */
  #reroutes = 0;
  // subject → Redis's last decision for it (`local` mode only), in two generations (KNOWN_MAX)
  #known = new Map<string, Decision>();
  #knownBefore = new Map<string, Decision>();

  // `primary` should bound its own calls (RedisLimiter does, by the client's commandTimeout): the
  // breaker decides whether to call Redis, not how long to wait for it.
  constructor(primary: RateLimiter, local: RateLimiter, opts: FailoverOptions) {
    this.#primary = primary;
    this.#local = local;
    this.#opts = opts;
    this.#breakerMs = opts.breakerMs ?? 1000;
    (primary as RateLimiter & Rerouting).onReroute?.(() => this.#rerouted());
  }

  get redisUp(): boolean {
    return this.#up;
  }

  /** the servers whose breaker is open now ('' for the only one, or for "no primary known") */
  get unreachable(): string[] {
    return [...this.#open.keys()];
  }

  async consume(subject: string, limit: Limit, ban: BanPolicy, nowMs?: number): Promise<Decision> {
    let breaker: Breaker | undefined;
    if (this.#open.size !== 0) {
      breaker = this.#open.get(this.#nodeOf(subject));
      if (breaker && (this.#opts.probeInBackground || breaker.probing || performance.now() < breaker.openUntil)) {
        return this.#withoutRedis(subject, limit, ban, nowMs, undefined);
      }
    }
    if (this.#opts.redisStalled?.()) return this.#withoutRedis(subject, limit, ban, nowMs, undefined);
    if (breaker) breaker.probing = true;
    const reroutes = this.#reroutes;
    try {
      const decision = await this.#primary.consume(subject, limit, ban, nowMs);
      if (breaker) this.#shut(breaker);
      // all this adds while Redis answers: a size check and one Map.set of the decision already made
      if (this.#opts.mode === 'local') this.#remember(subject, decision);
      return decision;
    } catch (err) {
      this.#trip(err, reroutes, subject);
      return this.#withoutRedis(subject, limit, ban, nowMs, err);
    } finally {
      if (breaker) breaker.probing = false;
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const breaker of this.#open.values()) if (breaker.timer) clearTimeout(breaker.timer);
    await Promise.all([this.#primary.close(), this.#local.close()]);
  }

  /** the server `subject`'s calls go to now: '' when the primary names none (one breaker for all) */
  #nodeOf(subject: string): string {
    return (this.#primary as RateLimiter & Rerouting).nodeOf?.(subject) ?? '';
  }

  /** `reroutes`: this.#reroutes when the failed call was made, `subject`: whose call it was */
  #trip(err: unknown, reroutes: number, subject: string): void {
    this.#opts.onCommandError?.(err);
    // the server that failed the call (limiter-nodes.ts names it, also after a redirection), else the one
    // the subject's calls go to; with no `nodeOf` there is one breaker, ''
    const failedAt = (err as { node?: unknown }).node;
    const node = typeof failedAt === 'string' && (this.#primary as Rerouting).nodeOf ? failedAt : this.#nodeOf(subject);
    let breaker = this.#open.get(node);
    // made before a reroute, it failed on the server left behind: that says nothing of the new one, which
    // is tried at once (and a breaker a call since has closed stays closed)
    const stale = reroutes !== this.#reroutes;
    if (stale && !breaker) return;
    const waitMs = stale ? 0 : this.#breakerMs;
    if (!breaker) {
      breaker = { node, openUntil: 0, probing: false, timer: null };
      this.#open.set(node, breaker);
    }
    this.#arm(breaker, waitMs);
    if (this.#up) {
      this.#up = false;
      this.#opts.onRedisState?.(false);
    }
  }

  /** `breaker` stays open `waitMs` more (then half-open; with `probeInBackground`, probed then) */
  #arm(breaker: Breaker, waitMs: number): void {
    breaker.openUntil = performance.now() + waitMs;
    if (!this.#opts.probeInBackground || this.#closed) return;
    if (breaker.timer) clearTimeout(breaker.timer);
    breaker.timer = setTimeout(() => void this.#probe(breaker), waitMs).unref();
  }

  /** the primary now calls another server (a failover announced), or Redis may answer again: every breaker's wait is over */
  #rerouted(): void {
    this.#reroutes++;
    if (this.#closed) return;
    for (const breaker of this.#open.values()) this.#arm(breaker, 0);
  }

  /** the background probe of a server: closes its breaker when it answers, else opens it for another `breakerMs` */
  async #probe(breaker: Breaker): Promise<void> {
    breaker.timer = null;
    if (this.#open.get(breaker.node) !== breaker || breaker.probing || this.#closed) return;
    const subject = this.#probeSubjectFor(breaker.node);
    // no subject's calls go there any more (a failover or a reshard moved its slots): nothing to guard
    if (subject === null) return this.#shut(breaker);
    breaker.probing = true;
    const reroutes = this.#reroutes;
    try {
      await this.#primary.consume(subject, PROBE_LIMIT, PROBE_BAN);
      if (!this.#closed) this.#shut(breaker);
    } catch (err) {
      if (!this.#closed) this.#trip(err, reroutes, subject);
      // the call failed on another server than this breaker's (a redirection): it is probed again all the same
      if (!this.#closed && this.#open.get(breaker.node) === breaker && breaker.timer === null) this.#arm(breaker, this.#breakerMs);
    } finally {
      breaker.probing = false;
    }
  }

  /** a probe subject whose calls go to `node` now, or null if none of the first PROBE_SEARCH_MAX do */
  #probeSubjectFor(node: string): string | null {
    const known = this.#probeSubjects.get(node);
    if (known !== undefined && this.#nodeOf(known) === node) return known;
    for (let i = 0; i < PROBE_SEARCH_MAX; i++) {
      const subject = i === 0 ? PROBE_SUBJECT : `${PROBE_SUBJECT}:${i}`;
      if (this.#nodeOf(subject) !== node) continue;
      this.#probeSubjects.set(node, subject);
      return subject;
    }
    return null;
  }

  /** `breaker` closes: its server is called again */
  #shut(breaker: Breaker): void {
    if (breaker.timer) clearTimeout(breaker.timer);
    breaker.timer = null;
    if (this.#open.get(breaker.node) === breaker) this.#open.delete(breaker.node);
    if (!this.#up && this.#open.size === 0) {
      this.#up = true;
      this.#opts.onRedisState?.(true);
    }
  }

  #remember(subject: string, decision: Decision): void {
    if (this.#known.size >= KNOWN_MAX) {
      this.#knownBefore = this.#known;
      this.#known = new Map();
    }
    this.#known.set(subject, decision);
  }

  #withoutRedis(subject: string, limit: Limit, ban: BanPolicy, nowMs: number | undefined, cause: unknown): Promise<Decision> {
    if (this.#opts.mode === 'local') return this.#local.consume(subject, limit, ban, nowMs, this.#known.get(subject) ?? this.#knownBefore.get(subject));
    const err = new Error('rate limiter: Redis is unreachable', { cause }) as RedisDownError;
    err.code = 'REDIS_DOWN';
    return Promise.reject(err);
  }
}
