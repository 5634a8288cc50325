// The routing index of a Redis instance (DESIGN §8): the same sorted snapshot as the embedded index
// (domain-snapshot.ts), kept in Redis, plus the routes changed since. Start-up reads one string and a
// short list, whatever the number of domains; no instance reads the whole `portico:routes` hash
// except to write a new snapshot, in the background, under a lock.
//
// Keys: `portico:routes` (hostname → route JSON, the truth), `portico:routes:seq` (a counter),
// `portico:routes:changed` (ZSET hostname → the counter value of its last route change),
// `portico:routes:snapshot` (the snapshot) and `portico:routes:snapshot-seq` (the counter value it
// was taken at: every change at or below it is in it, so those leave the ZSET when it is stored).
import type { Redis } from 'ioredis';
import { DomainIndex } from './domain-index.ts';
import { DomainSnapshot, encodeSnapshot, type IndexEntry } from './domain-snapshot.ts';
import { scanHash } from './redis-scan.ts';
import type { DomainRoute } from './types.ts';

const ROUTES = 'portico:routes';
const SEQ = 'portico:routes:seq';
const CHANGED = 'portico:routes:changed';
const SNAPSHOT = 'portico:routes:snapshot';
const SNAPSHOT_SEQ = 'portico:routes:snapshot-seq';
const LOCK = 'portico:lock:routes-snapshot';
/** changes past which a new snapshot is written (and each instance reloads) */
const REBUILD_AT = 2000;
const CHECK_EVERY_MS = 60_000;
const LOCK_TTL_MS = 120_000;

/** Sets or removes one route and records the change (ARGV[2] '' removes); nothing when it is the same. */
export const SET_ROUTE = `
local current = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[2] == '' then
  if not current then return 0 end
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  if current == ARGV[2] then return 0 end
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[2]), ARGV[1])
return 1`;
export const SET_ROUTE_KEYS = [ROUTES, SEQ, CHANGED] as const;

// Stores a snapshot only when it is newer than the one there (two writers may race), and drops the
// changes it holds.
const COMMIT = `
if tonumber(redis.call('GET', KEYS[2]) or '-1') >= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[1])
return 1`;

const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;

type Call = <T>(run: () => Promise<T>) => Promise<T>;

export interface RedisRouteIndex {
  /** from memory, no I/O */
  route(hostname: string): DomainRoute | null;
  /** this instance just wrote the route */
  applyLocal(hostname: string, route: DomainRoute | null): void;
  /** re-reads one route (a change notice from any instance) */
  refresh(hostname: string): Promise<void>;
  /** loads the snapshot and the changes since (start-up) */
  load(): Promise<void>;
  /** the same after a missed notice; nothing before the first load */
  reload(): Promise<void>;
  /** writes a new snapshot when enough has changed (one instance, under a lock); runs every minute */
  maintain(): Promise<void>;
  close(): void;
}

const entryOf = (route: DomainRoute): IndexEntry => ({ ...route, status: 'verified' });

export interface RouteIndexOptions {
  /** changes past which a new snapshot is written */
  rebuildAt?: number;
}

export function openRedisRouteIndex(client: Redis, call: Call, options: RouteIndexOptions = {}): RedisRouteIndex {
  const rebuildAt = options.rebuildAt ?? REBUILD_AT;
  client.defineCommand('porticoCommitRoutes', { numberOfKeys: 3, lua: COMMIT });
  client.defineCommand('porticoReleaseRoutesLock', { numberOfKeys: 1, lua: RELEASE });
  const scripts = client as unknown as {
    porticoCommitRoutes(snapshot: string, seqKey: string, changed: string, seq: number, bytes: Buffer): Promise<number>;
    porticoReleaseRoutesLock(key: string, token: string): Promise<number>;
  };
  let index = new DomainIndex();
  let loaded = false;
  let loading: Promise<void> | null = null;
  let again = false;
  // hostnames changed while a load is in flight: read again once it is in place
  let touched: Set<string> | null = null;

  const parse = (text: string | null): IndexEntry | null => (text === null ? null : entryOf(JSON.parse(text) as DomainRoute));

  /** Reads every route (HSCAN pages) into a snapshot taken at `seq`. */
  async function build(): Promise<{ bytes: Buffer; seq: number }> {
    const seq = Number(await call(() => client.get(SEQ)) ?? 0);
    const entries = new Map<string, IndexEntry>();
    for (const [hostname, text] of await scanHash(client, ROUTES, call)) entries.set(hostname, entryOf(JSON.parse(text) as DomainRoute));
    return { bytes: encodeSnapshot(entries), seq };
  }

  async function commit(built: { bytes: Buffer; seq: number }): Promise<void> {
    await call(() => scripts.porticoCommitRoutes(SNAPSHOT, SNAPSHOT_SEQ, CHANGED, built.seq, built.bytes));
  }

  async function loadOnce(): Promise<void> {
    touched = new Set();
    try {
      const results = await call(() => client.multi().getBuffer(SNAPSHOT).get(SNAPSHOT_SEQ).zrange(CHANGED, '0', '-1', 'WITHSCORES').exec());
      let bytes = results?.[0]?.[1] as Buffer | null;
      let seq = Number(results?.[1]?.[1] ?? -1);
      let changedFlat = (results?.[2]?.[1] ?? []) as string[];
      if (bytes === null) {
        // no snapshot yet (a new deployment): make the first one now
        const built = await build();
        await commit(built);
        ({ bytes, seq } = built);
        changedFlat = await call(() => client.zrangebyscore(CHANGED, `(${seq}`, '+inf', 'WITHSCORES'));
      }
      const next = new DomainIndex(DomainSnapshot.decode(bytes));
      const changed: string[] = [];
      for (let i = 0; i < changedFlat.length; i += 2) if (Number(changedFlat[i + 1]) > seq) changed.push(changedFlat[i]);
      await readInto(next, changed);
      const late = touched;
      touched = null;
      index = next;
      loaded = true;
      await readInto(index, [...late]);
    } finally {
      touched = null;
    }
  }

  async function readInto(target: DomainIndex, hostnames: string[]): Promise<void> {
    for (let i = 0; i < hostnames.length; i += 1000) {
      const chunk = hostnames.slice(i, i + 1000);
      const texts = await call(() => client.hmget(ROUTES, ...chunk));
      chunk.forEach((hostname, j) => target.set(hostname, parse(texts[j])));
    }
  }

  function load(): Promise<void> {
    if (loading) {
      again = true;
      return loading;
    }
    loading = (async () => {
      try {
        do {
          again = false;
          await loadOnce();
        } while (again);
      } finally {
        loading = null;
      }
    })();
    return loading;
  }

  /** One instance writes a new snapshot once enough has changed; each instance then reloads. */
  async function maintain(): Promise<void> {
    if ((await call(() => client.zcard(CHANGED))) > rebuildAt) {
      const token = Math.random().toString(36).slice(2);
      if ((await call(() => client.set(LOCK, token, 'PX', LOCK_TTL_MS, 'NX'))) !== null) {
        try {
          await commit(await build());
        } finally {
          await call(() => scripts.porticoReleaseRoutesLock(LOCK, token)).catch(() => undefined);
        }
      }
    }
    if (index.changed > rebuildAt) await load();
  }
  // a failed pass (Redis away) is tried again at the next one
  const timer = setInterval(() => void maintain().catch(() => undefined), CHECK_EVERY_MS);
  timer.unref();

  return {
    route: (hostname) => index.route(hostname),
    applyLocal(hostname, route) {
      index.set(hostname, route && entryOf(route));
      touched?.add(hostname);
    },
    async refresh(hostname) {
      touched?.add(hostname);
      const text = await call(() => client.hget(ROUTES, hostname));
      index.set(hostname, parse(text));
    },
    load,
    maintain,
    // the subscriber's first connect arrives as such a notice, before there is anything to reload
    reload: () => (loaded || loading ? load() : Promise.resolve()),
    close: () => clearInterval(timer),
  };
}
