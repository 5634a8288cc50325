// The limiter decides one request: is this subject (an account in one environment, or a client IP)
// allowed under its limit right now? Check and count are one atomic step; refused requests do not
// consume quota; a subject that keeps calling while refused is banned for a while.
// Two backends: redis-limiter.ts (shared, one Lua round trip) and memory-limiter.ts (one process).

export interface Limit {
  perMinute: number;
  perDay: number;
}

export interface BanPolicy {
  /** more than this many refusals inside `windowSeconds` bans the subject */
  refusals: number;
  windowSeconds: number;
  banSeconds: number;
}

export interface Decision {
  allowed: boolean;
  /** 'rate_limited' or 'key_banned' when refused */
  reason: 'ok' | 'rate_limited' | 'key_banned';
  /** the window reported in X-RateLimit-*: fewest remaining (tie: the longer); on refusal the exhausted one */
  limit: number;
  remaining: number;
  /** Unix seconds when the reported window ends */
  reset: number;
  /** whole seconds >= 1 when refused, 0 when allowed */
  retryAfter: number;
}

export interface RateLimiter {
  /**
   * `subject` identifies the counter set, e.g. `acct_123:production` or `ip:203.0.113.7:staging`.
   * `nowMs` is injected by tests; production passes nothing (Redis TIME / Date.now()).
   * `known`: the last decision Redis gave for `subject` (FailoverLimiter passes it while Redis cannot
   * be asked). A one-process backend counts on from the counts it implies, and keeps its ban, rather
   * than from 0; the Redis backend holds the counts itself and ignores it.
   */
  consume(subject: string, limit: Limit, ban: BanPolicy, nowMs?: number, known?: Decision): Promise<Decision>;
  close(): Promise<void>;
}
