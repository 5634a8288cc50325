// Redis first; when Redis fails, answer locally (`ratelimit.onRedisDown: local`, limits then hold
// per instance) or refuse to decide (`closed`, the caller answers 503). DESIGN §4: recovery needs no
// restart, so a circuit breaker lets one probe through every `breakerMs` and closes on success.
import type { BanPolicy, Decision, Limit, RateLimiter } from './limiter.ts';

export interface FailoverOptions {
  mode: 'local' | 'closed';
  /** how long Redis is not called at all after a failure; default 1000 */
  breakerMs?: number;
  onRedisState?(up: boolean): void;
  onCommandError?(err: unknown): void;
}

export type RedisDownError = Error & { code: 'REDIS_DOWN' };

export class FailoverLimiter implements RateLimiter {
  #primary: RateLimiter;
  #local: RateLimiter;
  #opts: FailoverOptions;
  #breakerMs: number;
  #up = true;
  // 0: closed (Redis is called). Otherwise open until this instant (performance.now()), then
  // half-open: exactly one request probes Redis while the others keep being answered without it.
  #openUntil = 0;
  #probing = false;

  // `primary` should bound its own calls (RedisLimiter does, by the client's commandTimeout): the
  // breaker decides whether to call Redis, not how long to wait for it.
  constructor(primary: RateLimiter, local: RateLimiter, opts: FailoverOptions) {
    this.#primary = primary;
    this.#local = local;
    this.#opts = opts;
    this.#breakerMs = opts.breakerMs ?? 1000;
  }

  get redisUp(): boolean {
    return this.#up;
  }

  async consume(subject: string, limit: Limit, ban: BanPolicy, nowMs?: number): Promise<Decision> {
    if (this.#openUntil !== 0 && (this.#probing || performance.now() < this.#openUntil)) {
      return this.#withoutRedis(subject, limit, ban, nowMs, undefined);
    }
    const probe = this.#openUntil !== 0;
    if (probe) this.#probing = true;
    try {
      const decision = await this.#primary.consume(subject, limit, ban, nowMs);
      if (probe) this.#close();
      return decision;
    } catch (err) {
      this.#trip(err);
      return this.#withoutRedis(subject, limit, ban, nowMs, err);
    } finally {
      if (probe) this.#probing = false;
    }
  }

  async close(): Promise<void> {
    await Promise.all([this.#primary.close(), this.#local.close()]);
  }

  #trip(err: unknown): void {
    this.#openUntil = performance.now() + this.#breakerMs;
    this.#opts.onCommandError?.(err);
    if (this.#up) {
      this.#up = false;
      this.#opts.onRedisState?.(false);
    }
  }

  #close(): void {
    this.#openUntil = 0;
    if (!this.#up) {
      this.#up = true;
      this.#opts.onRedisState?.(true);
    }
  }

  #withoutRedis(subject: string, limit: Limit, ban: BanPolicy, nowMs: number | undefined, cause: unknown): Promise<Decision> {
    if (this.#opts.mode === 'local') return this.#local.consume(subject, limit, ban, nowMs);
    const err = new Error('rate limiter: Redis is unreachable', { cause }) as RedisDownError;
    err.code = 'REDIS_DOWN';
    return Promise.reject(err);
  }
}
