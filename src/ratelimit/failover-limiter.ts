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
import type { BanPolicy, Decision, Limit, RateLimiter } from './limiter.ts';

/** the background probe's own counters (`portico:rl:{portico:probe}`), never refused */
const PROBE_SUBJECT = 'portico:probe';
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
  /** while the breaker is open, probe every `breakerMs` on a timer instead of through a request */
  probeInBackground?: boolean;
}

export type RedisDownError = Error & { code: 'REDIS_DOWN' };

/** a primary that tells when calls go to another server, or may work again, without a failure seen */
interface Rerouting {
  onReroute?(listener: () => void): void;
}

export class FailoverLimiter implements RateLimiter {
  #primary: RateLimiter;
  #local: RateLimiter;
  #opts: FailoverOptions;
  #breakerMs: number;
  #up = true;
  // 0: closed (Redis is called). Otherwise open until this instant (performance.now()), then
  // half-open: exactly one request probes Redis while the others keep being answered without it
  // (with `probeInBackground`: the timer's probe, and every request is answered without Redis).
  #openUntil = 0;
  #probing = false;
  #probeTimer: NodeJS.Timeout | null = null;
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

  async consume(subject: string, limit: Limit, ban: BanPolicy, nowMs?: number): Promise<Decision> {
    if (this.#openUntil !== 0 && (this.#opts.probeInBackground || this.#probing || performance.now() < this.#openUntil)) {
      return this.#withoutRedis(subject, limit, ban, nowMs, undefined);
    }
    if (this.#opts.redisStalled?.()) return this.#withoutRedis(subject, limit, ban, nowMs, undefined);
    const probe = this.#openUntil !== 0;
    if (probe) this.#probing = true;
    const reroutes = this.#reroutes;
    try {
      const decision = await this.#primary.consume(subject, limit, ban, nowMs);
      if (probe) this.#close();
      // all this adds while Redis answers: a size check and one Map.set of the decision already made
      if (this.#opts.mode === 'local') this.#remember(subject, decision);
      return decision;
    } catch (err) {
      this.#trip(err, reroutes);
      return this.#withoutRedis(subject, limit, ban, nowMs, err);
    } finally {
      if (probe) this.#probing = false;
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#probeTimer) clearTimeout(this.#probeTimer);
    await Promise.all([this.#primary.close(), this.#local.close()]);
  }

  /** `reroutes`: this.#reroutes when the failed call was made */
  #trip(err: unknown, reroutes: number): void {
    this.#opts.onCommandError?.(err);
    // made before a reroute, it failed on the server left behind: that says nothing of the new one, which
    // is tried at once (and a breaker a call since has closed stays closed)
    const stale = reroutes !== this.#reroutes;
    if (stale && this.#openUntil === 0) return;
    const waitMs = stale ? 0 : this.#breakerMs;
    this.#openUntil = performance.now() + waitMs;
    if (this.#up) {
      this.#up = false;
      this.#opts.onRedisState?.(false);
    }
    if (this.#opts.probeInBackground && !this.#closed) {
      if (this.#probeTimer) clearTimeout(this.#probeTimer);
      this.#probeTimer = setTimeout(() => void this.#probe(), waitMs).unref();
    }
  }

  /** the primary now calls another server (a failover announced), or Redis may answer again: the breaker's wait is over */
  #rerouted(): void {
    this.#reroutes++;
    if (this.#openUntil === 0 || this.#closed) return;
    this.#openUntil = performance.now();
    if (this.#opts.probeInBackground) {
      if (this.#probeTimer) clearTimeout(this.#probeTimer);
      this.#probeTimer = null;
      void this.#probe();
    }
  }

  /** the background probe: closes the breaker when Redis answers, else opens it for another `breakerMs` */
  async #probe(): Promise<void> {
    this.#probeTimer = null;
    if (this.#openUntil === 0 || this.#probing || this.#closed) return;
    this.#probing = true;
    const reroutes = this.#reroutes;
    try {
      await this.#primary.consume(PROBE_SUBJECT, PROBE_LIMIT, PROBE_BAN);
      if (!this.#closed) this.#close();
    } catch (err) {
      if (!this.#closed) this.#trip(err, reroutes);
    } finally {
      this.#probing = false;
    }
  }

  #close(): void {
    this.#openUntil = 0;
    if (!this.#up) {
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
