// The shared limiter: every instance counts in one Redis, one script call per request.
// Keys of one subject: portico:rl:{<subject>}:m:<minute start>, :d:<day start>, :ref, :ban — one
// hash tag, so a Redis Cluster keeps them in one slot and the script may touch them all.
import type { Redis } from 'ioredis';
import type { BanPolicy, Decision, Limit, RateLimiter } from './limiter.ts';
import { LIMITER_SCRIPT } from './limiter-script.ts';
import { bannedDecision, windowDecision, windowsAt } from './windows.ts';

const COMMAND = 'porticoRateLimit';
const ALLOWED = 0;
const BANNED = 2;

type Reply = [code: number, minuteUsed: number, dayUsed: number, nowMs: number, banEndMs: number];
type ScriptCall = (ban: string, refusals: string, windowPrefix: string, ...argv: string[]) => Promise<Reply>;

export class RedisLimiter implements RateLimiter {
  #run: ScriptCall;
  #timeoutMs: number | undefined;
  // subject → ban end (ms). A banned client that keeps hammering is answered here, without a Redis
  // round trip, until its ban ends. Measured on this process's clock, Redis's TIME set the end:
  // skew between the two only moves the moment the next request goes to Redis again.
  #bans = new Map<string, number>();
  #sweepBansAt = 1024;

  // The client belongs to the caller (it is shared with the stores), so close() leaves it open.
  // It should have enableOfflineQueue: false and a commandTimeout, so a dead Redis fails fast.
  constructor(client: Redis) {
    // defineCommand sends EVALSHA and falls back to EVAL on NOSCRIPT (after SCRIPT FLUSH or a
    // restart), so the script is never loaded by hand.
    client.defineCommand(COMMAND, { lua: LIMITER_SCRIPT, numberOfKeys: 3 });
    this.#run = (client as unknown as Record<typeof COMMAND, ScriptCall>)[COMMAND].bind(client);
    this.#timeoutMs = client.options.commandTimeout;
  }

  async consume(subject: string, limit: Limit, ban: BanPolicy, nowMs?: number): Promise<Decision> {
    const banEnd = this.#bans.get(subject);
    if (banEnd !== undefined) {
      const now = nowMs ?? Date.now();
      if (banEnd > now) return bannedDecision(limit, banEnd, now);
      this.#bans.delete(subject);
    }

    const base = `portico:rl:{${escapeTag(subject)}}:`;
    const call = this.#run(
      base + 'ban', base + 'ref', base,
      nowMs === undefined ? '' : String(Math.floor(nowMs)),
      String(limit.perMinute), String(limit.perDay),
      String(ban.refusals), String(ban.windowSeconds * 1000), String(ban.banSeconds * 1000),
    );
    const [code, minuteUsed, dayUsed, now, banEndMs] = await withTimeout(call, this.#timeoutMs);

    if (code === BANNED) {
      this.#rememberBan(subject, banEndMs);
      return bannedDecision(limit, banEndMs, now);
    }
    const [minute, day] = windowsAt(limit, minuteUsed, dayUsed, now);
    const decision = windowDecision(minute, day, now);
    if (decision.allowed !== (code === ALLOWED)) {
      // Only possible if the script and windows.ts disagree: a bug, not a state to serve from.
      throw new Error(`rate limit script answered ${code} but the counts say allowed=${decision.allowed}`);
    }
    return decision;
  }

  async close(): Promise<void> {
    this.#bans.clear();
  }

  #rememberBan(subject: string, banEndMs: number): void {
    this.#bans.set(subject, banEndMs);
    // Bounded by the number of live bans: drop ended ones whenever the map doubles.
    if (this.#bans.size < this.#sweepBansAt) return;
    const now = Date.now();
    for (const [s, end] of this.#bans) if (end <= now) this.#bans.delete(s);
    this.#sweepBansAt = Math.max(1024, this.#bans.size * 2);
  }
}

// A `}` in the subject would end the hash tag early (and `{}` would mean no tag at all), splitting
// one subject's keys across slots; percent-encode the three characters that matter.
function escapeTag(subject: string): string {
  return subject.replace(/[%{}]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
}

// ioredis's commandTimeout starts when a command is written; with auto-pipelining a command can first
// wait for the pipeline in flight, and a NOSCRIPT reply costs a second trip. This bounds the whole
// call, so no request waits on Redis longer than the configured timeout.
function withTimeout<T>(promise: Promise<T>, ms: number | undefined): Promise<T> {
  if (ms === undefined) return promise;
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(Object.assign(new Error(`rate limit call to Redis took longer than ${ms} ms`), { code: 'REDIS_TIMEOUT' }));
    }, ms);
    promise.then(
      (value) => { clearTimeout(timer); resolve(value); },
      (err: unknown) => { clearTimeout(timer); reject(err); },
    );
  });
}
