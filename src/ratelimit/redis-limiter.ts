// The shared limiter: every instance counts in one Redis, one script call per request.
// One key per subject, portico:rl:{<subject>}: a hash with its windows, refusals and ban (see
// limiter-script.ts for why one key). The subject is the hash tag, so subjects spread over a Cluster.
import type { ConnectionOptions } from 'node:tls';
import type { Redis } from 'ioredis';
import type { BanPolicy, Decision, Limit, RateLimiter } from './limiter.ts';
import { LIMITER_SCRIPT } from './limiter-script.ts';
import { keySlot } from '../state/redis-slot.ts';
import type { RedisConnections } from '../state/redis-connect.ts';
import { ANNOUNCED_MS, PRIMARY_ANNOUNCED } from '../state/sentinel-switch.ts';
import { LimiterConnection } from './limiter-connection.ts';
import { LimiterNodes } from './limiter-nodes.ts';
import { bulk, type Reply } from './resp.ts';
import { bannedDecision, windowDecision, windowsAt } from './windows.ts';

const ALLOWED = 0;
const BANNED = 2;
/** numkeys, 1 key, 6 arguments */
const ARG_COUNT = 8;
const NOW_FROM_REDIS = bulk('');
const SUBJECTS_MAX = 10_000;

/** the RESP of the limit and ban arguments, kept while the values stay the same */
interface LimitArgs {
  perMinute: number;
  perDay: number;
  ban: BanPolicy;
  text: string;
}

/** one connection to one server, or one per primary (Sentinel, Cluster: limiter-nodes.ts) */
type Route = (slot: number, args: string, argCount: number) => Promise<Reply>;

export class RedisLimiter implements RateLimiter {
  #run: Route;
  /** the server a slot's calls go to ('' with one server: nothing to tell apart) */
  #nodeFor: (slot: number) => string = () => '';
  #close: () => void;
  // subject → ban end (ms). A banned client that keeps hammering is answered here, without a Redis
  // round trip, until its ban ends. Measured on this process's clock, Redis's TIME set the end:
  // skew between the two only moves the moment the next request goes to Redis again.
  #bans = new Map<string, number>();
  #sweepBansAt = 1024;
  // subject → the RESP of numkeys and its key, and its slot: the same few subjects call again and again
  #keys = new Map<string, { text: string; slot: number }>();
  #limitArgs = new WeakMap<Limit, LimitArgs>();
  #onReroute: Array<() => void> = [];

  // The client belongs to the caller (it is shared with the stores), so close() leaves it open. The
  // limiter makes its own connections (see limiter-connection.ts for why): with a plain client, to the
  // same server with the client's options; with the connections of redis-connect.ts, to the primary
  // ioredis names for each call's slot (limiter-nodes.ts). Each call is bounded by the client's
  // commandTimeout; the connections close with close() or when the client ends.
  constructor(redis: Redis | RedisConnections) {
    if ('primaryFor' in redis && typeof redis.primaryFor === 'function') {
      const { auth, options } = redis;
      const connectionOptions = {
        username: auth.username,
        password: auth.password,
        db: auth.db || undefined,
        tls: auth.tls || undefined,
        connectTimeoutMs: Math.max(options.commandTimeoutMs, 1000),
        commandTimeoutMs: options.commandTimeoutMs,
        connectionName: 'portico-limiter',
      };
      if (redis.mode === 'standalone') {
        // one server: no topology to follow, so no retry path on the way of every call
        const address = redis.primaryFor(0)!;
        const at = address.lastIndexOf(':');
        const connection = new LimiterConnection({ ...connectionOptions, host: address.slice(0, at).replace(/^\[|\]$/g, ''), port: Number(address.slice(at + 1)) }, LIMITER_SCRIPT);
        this.#run = (_slot, args, argCount) => connection.run(args, argCount);
        this.#close = () => connection.close();
      } else {
        // Sentinel: ioredis's connection still on a server that answered -READONLY is made again, which
        // asks the sentinels for the primary
        const topology = redis.mode !== 'sentinel' ? redis : {
          primaryFor: (slot: number) => redis.primaryFor(slot),
          primaries: () => redis.primaries(),
          refreshTopology: () => redis.refreshTopology(),
          demoted: (address: string) => {
            if (redis.primaryFor(0) === address) redis.client.disconnect(true);
          },
        };
        const nodes = new LimiterNodes(topology, connectionOptions, LIMITER_SCRIPT);
        const unfollow = redis.mode === 'sentinel' ? this.#followAnnouncements(redis.client, nodes) : () => undefined;
        this.#run = (slot, args, argCount) => nodes.run(slot, args, argCount);
        this.#nodeFor = (slot) => nodes.nodeFor(slot) ?? '';
        this.#close = () => {
          unfollow();
          nodes.close();
        };
      }
      redis.client.once('end', () => this.#close());
      return;
    }
    const client = redis as Redis;
    const o = client.options;
    const connection = new LimiterConnection({
      host: o.host,
      port: o.port,
      path: (o as { path?: string }).path,
      family: o.family,
      // ioredis leaves unset options null or undefined
      username: o.username ?? undefined,
      password: o.password ?? undefined,
      db: o.db ? Number(o.db) : undefined,
      tls: (o as { tls?: ConnectionOptions | boolean }).tls || undefined,
      connectTimeoutMs: o.connectTimeout,
      commandTimeoutMs: o.commandTimeout,
      connectionName: o.connectionName ? `${o.connectionName}-limiter` : undefined,
    }, LIMITER_SCRIPT);
    this.#run = (_slot, args, argCount) => connection.run(args, argCount);
    this.#close = () => connection.close();
    client.once('end', () => connection.close());
  }

  /**
   * The sentinels announced a failover (sentinel-switch.ts): at +switch-master the calls go to the
   * announced primary at once, as the state connections do, and a caller waiting out a breaker
   * (FailoverLimiter) tries again at once; so it does when ioredis is connected again (after a lost
   * connection, a -READONLY): the server it names may answer now. Returns what stops following.
   */
  #followAnnouncements(client: RedisConnections['client'], nodes: LimiterNodes): () => void {
    let announced: string | null = null;
    const onAnnounced = (primary: string | null) => {
      nodes.announce(primary, ANNOUNCED_MS);
      // every sentinel announces it: tried again at the first
      const moved = primary !== null && primary !== announced;
      announced = primary;
      if (moved) this.#rerouted();
    };
    const onReady = () => this.#rerouted();
    client.on(PRIMARY_ANNOUNCED, onAnnounced);
    client.on('ready', onReady);
    return () => {
      client.off(PRIMARY_ANNOUNCED, onAnnounced);
      client.off('ready', onReady);
    };
  }

  /**
   * `listener` runs whenever calls go to another server than before, or may work again at once, without
   * a failure having been seen: a failover the sentinels announced, ioredis connected again (Sentinel).
   */
  onReroute(listener: () => void): void {
    this.#onReroute.push(listener);
  }

  #rerouted(): void {
    for (const listener of this.#onReroute) listener();
  }

  /**
   * The server `subject`'s calls go to now ("host:port"; '' while none is known, and always with one
   * server): a failure names the same server (limiter-nodes.ts), so FailoverLimiter keeps a breaker per server.
   */
  nodeOf(subject: string): string {
    return this.#nodeFor(this.#keys.get(subject)?.slot ?? keySlot(escapeTag(subject)));
  }

  async consume(subject: string, limit: Limit, ban: BanPolicy, nowMs?: number): Promise<Decision> {
    if (this.#bans.size !== 0) {
      const banEnd = this.#bans.get(subject);
      if (banEnd !== undefined) {
        const now = nowMs ?? Date.now();
        if (banEnd > now) return bannedDecision(limit, banEnd, now);
        this.#bans.delete(subject);
      }
    }

    const keys = this.#keysOf(subject);
    const args = keys.text + (nowMs === undefined ? NOW_FROM_REDIS : bulk(String(Math.floor(nowMs)))) + this.#limitArgsOf(limit, ban);
    const [code, minuteUsed, dayUsed, now, banEndMs] = replyOf(await this.#run(keys.slot, args, ARG_COUNT));

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

  #keysOf(subject: string): { text: string; slot: number } {
    let keys = this.#keys.get(subject);
    if (keys === undefined) {
      const tag = escapeTag(subject);
      keys = { text: bulk('1') + bulk(`portico:rl:{${tag}}`), slot: keySlot(tag) };
      // anonymous callers are counted per IP: drop the oldest subject rather than grow without bound
      if (this.#keys.size >= SUBJECTS_MAX) this.#keys.delete(this.#keys.keys().next().value!);
      this.#keys.set(subject, keys);
    }
    return keys;
  }

  #limitArgsOf(limit: Limit, ban: BanPolicy): string {
    const cached = this.#limitArgs.get(limit);
    if (cached !== undefined && cached.ban === ban && cached.perMinute === limit.perMinute && cached.perDay === limit.perDay) return cached.text;
    const text = bulk(String(limit.perMinute)) + bulk(String(limit.perDay)) +
      bulk(String(ban.refusals)) + bulk(String(ban.windowSeconds * 1000)) + bulk(String(ban.banSeconds * 1000));
    this.#limitArgs.set(limit, { perMinute: limit.perMinute, perDay: limit.perDay, ban, text });
    return text;
  }

  async close(): Promise<void> {
    this.#bans.clear();
    this.#close();
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

// A `}` in the subject would end the hash tag early (and `{}` would mean no tag at all): Redis would
// place the key in another slot than keySlot(tag) names, and every call would be redirected;
// percent-encode the three characters that matter.
function escapeTag(subject: string): string {
  return subject.replace(/[%{}]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
}

/** {code, minuteUsed, dayUsed, nowMs, banEndMs}: see limiter-script.ts */
function replyOf(reply: Reply): [number, number, number, number, number] {
  if (!Array.isArray(reply) || reply.length !== 5 || typeof reply[0] !== 'number' || typeof reply[1] !== 'number' ||
    typeof reply[2] !== 'number' || typeof reply[3] !== 'number' || typeof reply[4] !== 'number') {
    throw new Error('rate limit script answered something else than five integers');
  }
  return reply as [number, number, number, number, number];
}
