// One process's limiter: the embedded backend, and the fallback while Redis is unreachable.
// Same steps as limiter-script.ts, in the same order; the decision is synchronous, so one
// consume() cannot interleave with another and check-and-count stays atomic.
//
// Decisions are taken when asked, but handed back after the turn's reads (after-reads.ts), as the Redis
// limiter's answers arrive together with its reply. Answering inside each read made every /v1 answer
// its own write between two reads: under 50 keep-alive connections /v1 on embedded state cost 67–72 µs
// of CPU per request against 43–51 µs with the answers of a turn written together (and 0.70–0.75× the
// Redis backend's req per CPU-second).
//
// As the fallback while Redis cannot be asked, a call may bring `known`, Redis's last decision for the
// subject (failover-limiter.ts says why): its counts are a floor for this one's (floor() below).
import { afterReads } from '../after-reads.ts';
import type { BanPolicy, Decision, Limit, RateLimiter } from './limiter.ts';
import { bannedDecision, DAY_MS, isAllowed, MINUTE_MS, windowDecision, windowsAt, windowStart } from './windows.ts';

export interface Counters {
  minuteStart: number;
  minuteUsed: number;
  dayStart: number;
  dayUsed: number;
  refusals: number;
  refusalEndMs: number;
  banEndMs: number;
  /** nothing in here matters after this instant: the sweep may drop the entry */
  expiresMs: number;
}

export class MemoryLimiter implements RateLimiter {
  #counters = new Map<string, Counters>();
  #nextSweepMs = 0;
  /** moves with every decision that counted (limiter-checkpoint.ts saves when it moved) */
  changes = 0;

  consume(subject: string, limit: Limit, ban: BanPolicy, nowMs?: number, known?: Decision): Promise<Decision> {
    const decision = this.#decide(subject, limit, ban, nowMs ?? Date.now(), known);
    return new Promise((resolve) => afterReads(() => resolve(decision)));
  }

  #decide(subject: string, limit: Limit, ban: BanPolicy, now: number, known: Decision | undefined): Decision {
    this.#sweep(now);
    const c = this.#countersFor(subject, now);
    if (known !== undefined) floor(c, limit, known);

    // 1. A banned subject consumes nothing.
    if (c.banEndMs > now) return bannedDecision(limit, c.banEndMs, now);

    // 2. Both windows must have room; then both are counted.
    const [minute, day] = windowsAt(limit, c.minuteUsed, c.dayUsed, now);
    this.changes++;
    if (isAllowed(minute, day)) {
      c.minuteUsed++;
      c.dayUsed++;
      c.expiresMs = Math.max(c.expiresMs, day.endMs);
      return windowDecision(minute, day, now);
    }

    // 3. A refusal counts towards a ban; the refusal window opens at the first refusal.
    if (c.refusalEndMs <= now) {
      c.refusals = 0;
      c.refusalEndMs = now + ban.windowSeconds * 1000;
    }
    c.refusals++;
    if (c.refusals > ban.refusals) {
      c.banEndMs = now + ban.banSeconds * 1000;
      c.refusals = 0;
      c.refusalEndMs = 0;
      c.expiresMs = Math.max(c.expiresMs, c.banEndMs);
      return bannedDecision(limit, c.banEndMs, now);
    }
    c.expiresMs = Math.max(c.expiresMs, c.refusalEndMs);
    return windowDecision(minute, day, now);
  }

  async close(): Promise<void> {
    this.#counters.clear();
  }

  /** the subjects whose counts or ban still matter at `now` */
  snapshot(now: number): Array<[string, Counters]> {
    return [...this.#counters].filter(([, c]) => c.expiresMs > now);
  }

  /** puts back what snapshot() gave (read from disk: entries of another shape are skipped); how many */
  restore(entries: unknown, now: number): number {
    if (!Array.isArray(entries)) return 0;
    let restored = 0;
    for (const entry of entries) {
      if (!Array.isArray(entry) || typeof entry[0] !== 'string' || !isCounters(entry[1]) || entry[1].expiresMs <= now) continue;
      this.#counters.set(entry[0], { ...entry[1] });
      restored++;
    }
    return restored;
  }

  get size(): number {
    return this.#counters.size;
  }

  #countersFor(subject: string, now: number): Counters {
    let c = this.#counters.get(subject);
    if (!c) {
      c = { minuteStart: 0, minuteUsed: 0, dayStart: 0, dayUsed: 0, refusals: 0, refusalEndMs: 0, banEndMs: 0, expiresMs: 0 };
      this.#counters.set(subject, c);
    }
    // A new window starts from zero; the key names in Redis do the same by carrying the start.
    const minuteStart = windowStart(now, MINUTE_MS);
    if (c.minuteStart !== minuteStart) {
      c.minuteStart = minuteStart;
      c.minuteUsed = 0;
    }
    const dayStart = windowStart(now, DAY_MS);
    if (c.dayStart !== dayStart) {
      c.dayStart = dayStart;
      c.dayUsed = 0;
    }
    return c;
  }

  // Once a minute (of the caller's clock) drop subjects whose day, refusals and ban are all over,
  // so memory is bounded by the subjects seen in the last day, without a timer holding the process.
  #sweep(now: number): void {
    // An injected clock may jump backwards; sweep then too rather than wait for it to catch up.
    if (now < this.#nextSweepMs && now >= this.#nextSweepMs - MINUTE_MS) return;
    this.#nextSweepMs = now + MINUTE_MS;
    for (const [subject, c] of this.#counters) {
      if (c.expiresMs <= now) this.#counters.delete(subject);
    }
  }
}

const COUNTER_FIELDS = ['minuteStart', 'minuteUsed', 'dayStart', 'dayUsed', 'refusals', 'refusalEndMs', 'banEndMs', 'expiresMs'] as const;

function isCounters(value: unknown): value is Counters {
  return typeof value === 'object' && value !== null && COUNTER_FIELDS.every((field) => Number.isSafeInteger((value as Record<string, unknown>)[field]));
}

// What a decision of Redis's says about the subject's counters in the windows `c` is in. A decision
// reports one window (windows.ts): its end (`reset`) names it, and `limit - remaining` is what it had
// used with that call (a refusal: all of it). Every minute lies inside its day, so a minute of today is
// a floor for the day too. In the day's last minute both windows end together: the limit tells them
// apart (equal limits: the day, which then always has the fewest remaining). A window of another
// minute or day says nothing about this one's. A ban holds here until it ends.
function floor(c: Counters, limit: Limit, known: Decision): void {
  const endMs = known.reset * 1000;
  if (known.reason === 'key_banned') {
    c.banEndMs = Math.max(c.banEndMs, endMs);
    c.expiresMs = Math.max(c.expiresMs, endMs);
    return;
  }
  const dayEndMs = c.dayStart + DAY_MS;
  if (endMs <= c.dayStart || endMs > dayEndMs) return;
  const used = known.allowed ? known.limit - known.remaining : known.limit;
  if (used > c.dayUsed) c.dayUsed = used;
  const minute = endMs === c.minuteStart + MINUTE_MS && (endMs !== dayEndMs || known.limit !== limit.perDay);
  if (minute && used > c.minuteUsed) c.minuteUsed = used;
  c.expiresMs = Math.max(c.expiresMs, dayEndMs);
}
