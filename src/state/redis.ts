// Redis backend: shared by every instance, on one server, Sentinel or Cluster (redis-connect.ts). Hot
// reads (key lookups, accounts, category lists) go through a small in-process cache (redis-cache.ts),
// so an authenticated /v1 read makes no Redis round trip besides the limiter's; a change publishes on
// `portico:invalidate` and every instance reads its copy again at its next use (a changed key is
// dropped at once), every cache is read again when the subscriber reconnects, and entries live at
// most 60 s. Acknowledged writes wait for replicas (`write`, DESIGN §8).
// When Redis cannot be reached, reads fall back to the last data this instance saw (DESIGN §4,
// `onRedisDown: local`); writes reject with code STATE_UNAVAILABLE.
import type { Cluster, Redis } from 'ioredis';
import { connectRedis as connectTopology, type RedisConnectOptions, type RedisConnections } from './redis-connect.ts';
import { parseRedisUrl } from './redis-url.ts';
import { clusterStartError, listenToNodes } from './cluster-start-errors.ts';
import { stateUnavailable, type Account, type ApiKey, type Category, type Environment, type Stores } from './types.ts';
import { openRedisDomainStores } from './redis-domains.ts';
import { openRedisSchedule } from './redis-schedule.ts';
import { Cache } from './redis-cache.ts';
import { refusalIn, refusedRights, rightsError } from './redis-rights.ts';
import { SENTINELS_WAIT_MS } from './sentinel-switch.ts';
import { settledByConfiguration } from './redis-errors.ts';

const CHANNEL = 'portico:invalidate';
const SUSPECT_MS = 2_000;
/** how long after losing its connection a command still waits for it to come back */
const RECONNECT_WAIT_MS = 1_000;
/** keys read again at once after a reconnect; the others at their next use */
const KEYS_REREAD_AT_ONCE = 1000;
const ROUTE_RETRY_MS = 1000;
/** a route notice is followed for about a day of Redis being unreachable; a reconnect reloads all anyway */
const ROUTE_RETRIES = 86_400;
const READY_WAIT_MS = 5_000;
/** how long a write's answer waits for its change notice to be taken (see `publish`) */
const NOTICE_WAIT_MS = 200;

// Cap check, id assignment and write in one atomic step: ids are never reused, the cap never overshot.
const CREATE_CATEGORY = `
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
local id = redis.call('INCR', KEYS[2])
-- ARGV[2] is the category's JSON without its id: '{"name":…}' → '{"id":7,"name":…}'
redis.call('HSET', KEYS[1], id, '{"id":' .. id .. ',' .. string.sub(ARGV[2], 2))
return id`;

// Revocation is first-writer-wins, so every caller learns the one revokedAt that is stored.
const REVOKE_KEY = `
local text = redis.call('GET', KEYS[1])
if not text then return false end
local key = cjson.decode(text)
if key['revokedAt'] then return text end
key['revokedAt'] = ARGV[1]
text = cjson.encode(key)
redis.call('SET', KEYS[1], text)
return text`;

export type { RedisConnections } from './redis-connect.ts';

/** Connects in the topology `url` names (redis-url.ts); a number is the command timeout alone. */
export function connectRedis(url: string, options: number | RedisConnectOptions): RedisConnections {
  const target = parseRedisUrl(url);
  if (target instanceof Error) throw new Error(`PORTICO_REDIS_URL ${target.message}`);
  return connectTopology(target, typeof options === 'number' ? { commandTimeoutMs: options } : options);
}

export async function openRedisStores(connections: RedisConnections, now: () => number = Date.now): Promise<Stores> {
  const { client, subscriber, health } = connections;
  client.defineCommand('porticoCreateCategory', { numberOfKeys: 2, lua: CREATE_CATEGORY });
  client.defineCommand('porticoRevokeKey', { numberOfKeys: 1, lua: REVOKE_KEY });
  const scripts = client as unknown as {
    porticoCreateCategory(...args: unknown[]): Promise<number>;
    porticoRevokeKey(key: string, at: string): Promise<string | null>;
  };
  // A connection lost a moment ago is most often being made again already (a failover announced by
  // the sentinels moves it, sentinel-switch.ts; a restarted server is back within moments). A command
  // in the first second of such a gap waits for the connection (within the command timeout) instead
  // of failing at once; in a longer outage, commands fail at once.
  let lostAt: number | null = null;
  client.on('close', () => void (lostAt ??= now()));
  client.on('ready', () => void (lostAt = null));
  const reconnecting = async (): Promise<void> => {
    if (client.status === 'ready' || lostAt === null) return;
    const left = RECONNECT_WAIT_MS - (now() - lostAt);
    if (left > 0) await connected(client, Math.min(left, connections.options.commandTimeoutMs));
  };
  // After a failure, a command is preceded by a PING to the state's server (on a Cluster a plain PING
  // went to any node, and the write then into the frozen one) until Redis answers again: a frozen Redis
  // (SIGSTOP, a stalled network) still looks connected, and a write sent to it would be applied later
  // although its caller was told 503. Right after a timeout (this request's limiter call, most often)
  // Redis is not waited on again: the two waits made 2.0 s with a 1000 ms timeout. No failure to count.
  const call = async <T>(run: () => Promise<T>): Promise<T> => {
    if (connections.justTimedOut()) throw stateUnavailable(new Error('Redis did not answer a command in time a moment ago; not waiting on it again'));
    try {
      await reconnecting();
      if (now() - health.failedAt < SUSPECT_MS) await connections.pingState();
      return await run();
    } catch (err) {
      health.failedAt = now();
      connections.reportError(err);
      // not connected: ioredis says only that the stream isn't writeable; the connection's own error
      // (refused, an untrusted certificate, a wrong password) is the reason worth reporting
      throw stateUnavailable(client.status !== 'ready' && health.connectionError ? health.connectionError : err);
    }
  };
  // an acknowledged write waits for replicas (DESIGN §8), on the connection that made it
  const write = async <T>(run: () => Promise<T>): Promise<T> => {
    const result = await call(run);
    await connections.acknowledge();
    return result;
  };
  const { projects, domains, routeIndex } = openRedisDomainStores(client, call, write);
  const keyCache = new Cache<string, ApiKey | null>(call, now);
  const categoryLists = new Cache<Environment, Category[]>(call, now);
  const accountCache = new Cache<string, Account | null>(call, now);

  const findByHash = (hash: string): Promise<ApiKey | null> =>
    keyCache.read(hash, async () => {
      const id = await client.get(`portico:keyhash:${hash}`);
      const text = id === null ? null : await client.get(`portico:key:${id}`);
      return text === null ? null : (JSON.parse(text) as ApiKey);
    });

  const handlers: Array<(topic: string) => void> = [];
  // Notices may have been missed: every cached entry is read again before it answers. Lists and
  // accounts keep answering from the old copy if that read fails (a missed change is at worst an older
  // list or plan); a key must not (it may have been revoked meanwhile), so the keys in use are read
  // again at once, and until then a failed read is a failure. That starts once the client can read:
  // after a failover the subscriber may be back before it, and keys marked then would fail meanwhile.
  let keysPending = false;
  const rereadKeys = () => {
    keysPending = false;
    keyCache.markAllStale(false);
    let n = 0;
    for (const hash of keyCache.keys()) {
      if (++n > KEYS_REREAD_AT_ONCE) break;
      findByHash(hash).catch(() => undefined);
    }
  };
  const flush = () => {
    categoryLists.markAllStale(true);
    accountCache.markAllStale(true);
    if (client.status === 'ready') rereadKeys();
    else if (!keysPending) {
      keysPending = true;
      client.once('ready', rereadKeys);
    }
    // a failed reload keeps the index it had; the next notice or reconnect tries again
    routeIndex.reload().catch(() => undefined);
    for (const handler of handlers) handler('*');
  };
  subscriber.on('message', (_channel: string, message: string) => {
    const [kind, id] = splitOnce(message);
    // a changed key is dropped (a revoked one must never answer again); a changed list or account is
    // read again at its next use, and answers from its old copy only while Redis cannot be reached
    // (a revocation is final: a key this instance holds as revoked stays so)
    if (kind === 'key') {
      if (!keyCache.get(id)?.value?.revokedAt) keyCache.delete(id);
    } else if (kind === 'key-revoked') {
      // a key this instance holds is revoked: held as such (final), not dropped, so an outage that
      // starts now answers 401 for it, not 503; one it does not hold is read when asked
      const [hash, at] = splitOnce(id);
      const held = keyCache.get(hash)?.value;
      if (held) keyCache.put(hash, { ...held, revokedAt: held.revokedAt ?? at });
      else keyCache.delete(hash);
    }
    else if (kind === 'categories') categoryLists.markStale(id as Environment, true);
    else if (kind === 'account') accountCache.markStale(id, true);
    else if (kind === 'domain' || kind === 'project') {
      // the routing index first (its own read), then whoever else follows the domain
      if (kind === 'domain') refreshRoute(id, 0);
      for (const handler of handlers) handler(message);
    } else flush();
  });
  // messages may have been missed while disconnected
  subscriber.on('ready', flush);
  // subscribed first, so a change made while the index loads is not missed; the client must be
  // connected (it queues nothing offline), or the load fails at once while Redis is merely slow to answer.
  // Both waits are bounded: the subscription stays queued (and ioredis resubscribes after every
  // reconnect), but a Redis that cannot be reached — sentinels that refuse us among them — must stop the
  // start with its error, not hold it silently
  // On Sentinel, every sentinel is listened to first: only the failover's leader tells that it has
  // begun, and writes acknowledged on the old primary after that are lost (sentinel-switch.ts). A
  // sentinel that cannot be reached holds the start SENTINELS_WAIT_MS at most.
  // A Redis user short of a right Portico needs stops the start at once, with one error naming the user,
  // what Redis refused and the rule (redis-rights.ts): every right the check finds missing, else the
  // NOPERM of the subscription, of the connection (a Cluster's slot map: CLUSTER SLOTS; that one ends
  // the wait at once) or of the first commands. Not a Sentinel connection's error: a refusal there is
  // the sentinels' user (redis-connect.ts names what that one needs).
  const refused: { refusal: string | null; endWait: () => void } = { refusal: null, endWait: () => undefined };
  const waitEnded = new Promise<void>((resolve) => (refused.endWait = resolve));
  const onRefusal = (err: unknown) => void (refused.refusal ??= refusalIn(err));
  const onConnectionRefusal = (err: unknown) => {
    onRefusal(err);
    // wrong or missing credentials, a certificate that cannot be verified: asking again gets the same
    // answer, the start stops at once with it
    if (refused.refusal !== null || settledByConfiguration(err)) refused.endWait();
  };
  if (connections.mode !== 'sentinel') client.on('error', onConnectionRefusal);
  const nodeErrors = connections.mode === 'cluster' ? listenToNodes(client) : null;
  await Promise.race([
    waitEnded,
    Promise.all([
      within(subscriber.subscribe(CHANNEL).catch(onRefusal), READY_WAIT_MS),
      connected(client, READY_WAIT_MS),
      within(connections.sentinelsHeard, SENTINELS_WAIT_MS),
    ]),
  ]);
  client.off('error', onConnectionRefusal);
  nodeErrors?.stop();
  const giveUp = (err: Error): Error => {
    subscriber.disconnect();
    client.disconnect();
    return err;
  };
  const stopForRights = (refusal: string | string[]) => giveUp(rightsError(connections.auth.username, refusal));
  if (client.status === 'ready') {
    const missing = await refusedRights(client, connections.mode).catch((err: unknown) => (onRefusal(err), []));
    if (missing.length > 0) throw stopForRights(missing);
  }
  if (refused.refusal !== null) throw stopForRights(refused.refusal);
  // ioredis selects the URL's database on connecting and carries on in database 0 when the server
  // refuses it (an index past `databases`): the state would go where nobody asked
  if (client.status === 'ready' && connections.mode !== 'cluster' && connections.auth.db !== 0) {
    const db = connections.auth.db;
    const refusal = await client.select(db).then(() => null, (err: unknown) => err as Error);
    // no `cause`: its words are in the message already, and the log's error line joined them twice
    if (refusal !== null) throw giveUp(stateUnavailable(new Error(`PORTICO_REDIS_URL names database ${db}, which the server refuses (${refusal.message}); the start stops`)));
  }
  if (client.status !== 'ready' && nodeErrors) {
    // ioredis's "Failed to refresh slots cache." alone says less than the guess below
    const told = await clusterStartError(client as unknown as Cluster, nodeErrors.errors);
    health.connectionError = told ?? (health.connectionError?.name === 'ClusterAllFailedError' ? undefined : health.connectionError);
  }
  // still connecting and nothing said why: a TLS handshake that never ends (rediss:// to a port that
  // speaks plain RESP waits for bytes that never come), or a server that accepts and stays silent
  if (client.status !== 'ready' && !health.connectionError) {
    health.connectionError = new Error(`no connection to Redis within ${READY_WAIT_MS / 1000} s${connections.auth.tls ? ': the TLS handshake did not finish (rediss:// needs a port that speaks TLS)' : ': the server accepted the connection but did not answer'}`);
  }
  // nothing to serve from: said so (ioredis's own words may promise a retry, "Retrying from scratch
  // after 650ms", that a stopped start never makes)
  if (client.status !== 'ready' && health.connectionError) {
    const reason = health.connectionError;
    // no `cause`, as above ("…ECONNREFUSED 127.0.0.1:1; the start stops: connect ECONNREFUSED 127.0.0.1:1")
    throw giveUp(stateUnavailable(new Error(`${reason.message}; the start stops`)));
  }
  await routeIndex.load().catch((err: unknown) => {
    // a command refused (a server the check above cannot ask: Redis before 7.0)
    const refusal = client.status === 'ready' ? refusalIn(err) : null;
    throw refusal === null ? err : stopForRights(refusal);
  });

  // A change notice after a write: waited for, so the other instances have it before this answer
  // reaches anyone, but for NOTICE_WAIT_MS at most. On a Cluster PUBLISH goes to any node, and one
  // frozen there held a finished write's 201 up for a whole command timeout, after its WAIT had
  // waited out its own (2.3 s with a 1000 ms timeout). The notice still goes out when it can.
  const publish = (message: string) => within(client.publish(CHANNEL, message).catch(() => undefined), NOTICE_WAIT_MS);
  // A route that could not be read after its notice is taken out of the index (it may be a removal)
  // and read again until that works: a removed domain or redirect never answers from an old copy.
  function refreshRoute(hostname: string, attempt: number): void {
    routeIndex.refresh(hostname).catch(() => {
      routeIndex.applyLocal(hostname, null);
      if (attempt < ROUTE_RETRIES) setTimeout(() => refreshRoute(hostname, attempt + 1), ROUTE_RETRY_MS).unref();
    });
  }
  const readJson = async <T>(key: string): Promise<T | null> => {
    const text = await call(() => client.get(key));
    return text === null ? null : (JSON.parse(text) as T);
  };

  const fetchList = (environment: Environment): Promise<Category[]> =>
    categoryLists.read(environment, async () => {
      const all = await client.hvals(`portico:categories:${environment}`);
      return all.map((text) => JSON.parse(text) as Category).sort((a, b) => a.id - b.id);
    });

  return {
    accounts: {
      create: async (account) => {
        await write(() => client.set(`portico:account:${account.id}`, JSON.stringify(account)));
        // this instance may hold "unknown" for it; on a Cluster its own notice comes back later
        accountCache.put(account.id, account);
      },
      get: (id) =>
        accountCache.read(id, async () => {
          const text = await client.get(`portico:account:${id}`);
          return text === null ? null : (JSON.parse(text) as Account);
        }),
      update: async (account) => {
        const done = await write(() => client.set(`portico:account:${account.id}`, JSON.stringify(account), 'XX'));
        if (done === null) return null;
        accountCache.markStale(account.id, true);
        await publish(`account:${account.id}`);
        return account;
      },
    },
    keys: {
      create: async (key) => {
        await write(() => client.multi().set(`portico:key:${key.id}`, JSON.stringify(key)).set(`portico:keyhash:${key.hash}`, key.id).exec());
        // any instance, this one too, may hold "unknown" for this hash; on a Cluster a notice arrives
        // through the cluster bus, after the write's answer
        keyCache.put(key.hash, key);
        await publish(`key:${key.hash}`);
      },
      get: (id) => readJson<ApiKey>(`portico:key:${id}`),
      findByHash,
      revoke: async (id, at) => {
        const text = await write(() => scripts.porticoRevokeKey(`portico:key:${id}`, at));
        if (!text) return null;
        const revoked = JSON.parse(text) as ApiKey;
        keyCache.put(revoked.hash, revoked);
        // says what changed, so another instance answers 401 for it even while Redis is away after
        await call(() => client.publish(CHANNEL, `key-revoked:${revoked.hash}:${revoked.revokedAt}`));
        return revoked;
      },
    },
    categories: {
      list: fetchList,
      // through `call` like every read: right after this request's limiter call timed out it answers
      // from the cached list at once (it waited out a second timeout: 614 ms with a 300 ms one)
      get: async (environment, id) => {
        try {
          const text = await call(() => client.hget(`portico:categories:${environment}`, String(id)));
          return text === null ? null : (JSON.parse(text) as Category);
        } catch (err) {
          // an id the last copy does not hold may have been made since: unknown (503), never "none" (404)
          const cached = categoryLists.get(environment)?.value.find((c) => c.id === id);
          if (cached) return cached;
          throw err;
        }
      },
      create: async (environment, fields, cap) => {
        const id = await write(() =>
          scripts.porticoCreateCategory(
            `portico:categories:${environment}`,
            `portico:categories:${environment}:seq`,
            cap,
            JSON.stringify(fields),
          ),
        );
        if (id === 0) return 'full';
        const made: Category = { id, ...fields };
        // the newest this instance has seen, should Redis go away before the list is read again
        categoryLists.amendStale(environment, (list) => (list.some((c) => c.id === id) ? list : [...list, made]));
        await publish(`categories:${environment}`);
        return made;
      },
    },
    projects,
    domains,
    schedule: openRedisSchedule(client, call, write),
    events: {
      publish: async (topic) => {
        await call(() => client.publish(CHANNEL, topic));
      },
      subscribe: (handler) => {
        handlers.push(handler);
      },
    },
    health: async () => {
      try {
        await connections.pingState();
        return 'ok';
      } catch {
        return 'down';
      }
    },
    close: async () => {
      routeIndex.close();
      subscriber.disconnect();
      client.disconnect();
    },
  };
}

/** Resolves when `promise` settles or after `ms`, whichever comes first. */
function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([promise, new Promise((resolve) => (timer = setTimeout(resolve, ms)))]).then(() => clearTimeout(timer));
}

// the client's next 'ready', one listener however many commands wait for it: a listener per waiting
// command passed Node's limit of 10 in a failover under traffic (MaxListenersExceededWarning)
const nextReady = new WeakMap<Redis, Promise<void>>();

/** Resolves once the client is ready, or after `ms` (its next command then reports what is wrong). */
function connected(client: Redis, ms: number): Promise<void> {
  if (client.status === 'ready') return Promise.resolve();
  let ready = nextReady.get(client);
  if (ready === undefined) {
    ready = new Promise<void>((resolve) => client.once('ready', () => {
      nextReady.delete(client);
      resolve();
    }));
    nextReady.set(client, ready);
  }
  return within(ready, ms);
}

function splitOnce(message: string): [string, string] {
  const at = message.indexOf(':');
  return at === -1 ? [message, ''] : [message.slice(0, at), message.slice(at + 1)];
}
