// Redis backend: shared by every instance. Hot reads (key lookups, category lists) go through a small
// in-process cache; a change publishes on `portico:invalidate` so every instance drops its copy at
// once, every cache is flushed when the subscriber reconnects, and entries live at most 60 s.
// When Redis cannot be reached, reads fall back to the last data this instance saw (DESIGN §4,
// `onRedisDown: local`); writes reject with code STATE_UNAVAILABLE.
import { Redis } from 'ioredis';
import { stateUnavailable, type Account, type ApiKey, type Category, type Environment, type Stores } from './types.ts';

const CHANNEL = 'portico:invalidate';
const FRESH_MS = 60_000;
const KEY_CACHE_MAX = 100_000;

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

interface Cached<T> {
  value: T;
  at: number;
}

export interface RedisConnections {
  client: Redis;
  subscriber: Redis;
}

export function connectRedis(url: string, commandTimeoutMs: number): RedisConnections {
  const options = {
    enableAutoPipelining: true,
    // a dead Redis must fail requests at once, not queue them
    enableOfflineQueue: false,
    commandTimeout: commandTimeoutMs,
    maxRetriesPerRequest: 0,
    retryStrategy: (attempt: number) => Math.min(50 * attempt, 1000),
    lazyConnect: false,
  };
  const client = new Redis(url, { ...options, connectionName: 'portico' });
  const subscriber = new Redis(url, { ...options, enableOfflineQueue: true, commandTimeout: undefined, connectionName: 'portico-sub' });
  // errors are reported through health(), metrics and request outcomes; without a listener ioredis logs them
  client.on('error', () => undefined);
  subscriber.on('error', () => undefined);
  return { client, subscriber };
}

export async function openRedisStores({ client, subscriber }: RedisConnections, now: () => number = Date.now): Promise<Stores> {
  client.defineCommand('porticoCreateCategory', { numberOfKeys: 2, lua: CREATE_CATEGORY });
  client.defineCommand('porticoRevokeKey', { numberOfKeys: 1, lua: REVOKE_KEY });
  const scripts = client as unknown as {
    porticoCreateCategory(...args: unknown[]): Promise<number>;
    porticoRevokeKey(key: string, at: string): Promise<string | null>;
  };
  const keyCache = new Map<string, Cached<ApiKey | null>>();
  const categoryLists = new Map<Environment, Cached<Category[]>>();

  const flush = () => {
    keyCache.clear();
    categoryLists.clear();
  };
  subscriber.on('message', (_channel: string, message: string) => {
    const [kind, id] = splitOnce(message);
    if (kind === 'key') keyCache.delete(id);
    else if (kind === 'categories') categoryLists.delete(id as Environment);
    else flush();
  });
  // messages may have been missed while disconnected
  subscriber.on('ready', flush);
  await subscriber.subscribe(CHANNEL).catch(() => undefined);

  const publish = (message: string) => client.publish(CHANNEL, message).catch(() => undefined);
  const call = async <T>(run: () => Promise<T>): Promise<T> => {
    try {
      return await run();
    } catch (err) {
      throw stateUnavailable(err);
    }
  };
  const readJson = async <T>(key: string): Promise<T | null> => {
    const text = await call(() => client.get(key));
    return text === null ? null : (JSON.parse(text) as T);
  };
  const fresh = <T>(entry: Cached<T>): boolean => now() - entry.at < FRESH_MS;

  const fetchList = async (environment: Environment): Promise<Category[]> => {
    const cached = categoryLists.get(environment);
    if (cached && fresh(cached)) return cached.value;
    try {
      const all = await client.hvals(`portico:categories:${environment}`);
      const list = all.map((text) => JSON.parse(text) as Category).sort((a, b) => a.id - b.id);
      categoryLists.set(environment, { value: list, at: now() });
      return list;
    } catch (err) {
      if (cached) return cached.value; // last known data while Redis is away
      throw stateUnavailable(err);
    }
  };

  return {
    accounts: {
      create: async (account) => {
        await call(() => client.set(`portico:account:${account.id}`, JSON.stringify(account)));
      },
      get: (id) => readJson<Account>(`portico:account:${id}`),
      update: async (account) => {
        const done = await call(() => client.set(`portico:account:${account.id}`, JSON.stringify(account), 'XX'));
        if (done === null) return null;
        await publish(`account:${account.id}`);
        return account;
      },
    },
    keys: {
      create: async (key) => {
        await call(() => client.multi().set(`portico:key:${key.id}`, JSON.stringify(key)).set(`portico:keyhash:${key.hash}`, key.id).exec());
        // another instance may hold "unknown" for this hash
        await publish(`key:${key.hash}`);
      },
      get: (id) => readJson<ApiKey>(`portico:key:${id}`),
      findByHash: async (hash) => {
        const cached = keyCache.get(hash);
        if (cached && fresh(cached)) return cached.value;
        try {
          const id = await client.get(`portico:keyhash:${hash}`);
          const text = id === null ? null : await client.get(`portico:key:${id}`);
          const key = text === null ? null : (JSON.parse(text) as ApiKey);
          if (keyCache.size >= KEY_CACHE_MAX) keyCache.delete(keyCache.keys().next().value as string);
          keyCache.set(hash, { value: key, at: now() });
          return key;
        } catch (err) {
          if (cached) return cached.value;
          throw stateUnavailable(err);
        }
      },
      revoke: async (id, at) => {
        const text = await call(() => scripts.porticoRevokeKey(`portico:key:${id}`, at));
        if (!text) return null;
        const revoked = JSON.parse(text) as ApiKey;
        keyCache.delete(revoked.hash);
        await call(() => client.publish(CHANNEL, `key:${revoked.hash}`));
        return revoked;
      },
    },
    categories: {
      list: fetchList,
      get: async (environment, id) => {
        try {
          const text = await client.hget(`portico:categories:${environment}`, String(id));
          return text === null ? null : (JSON.parse(text) as Category);
        } catch (err) {
          const cached = categoryLists.get(environment);
          if (cached) return cached.value.find((c) => c.id === id) ?? null;
          throw stateUnavailable(err);
        }
      },
      create: async (environment, fields, cap) => {
        const id = await call(() =>
          scripts.porticoCreateCategory(
            `portico:categories:${environment}`,
            `portico:categories:${environment}:seq`,
            cap,
            JSON.stringify(fields),
          ),
        );
        if (id === 0) return 'full';
        categoryLists.delete(environment);
        await publish(`categories:${environment}`);
        return { id, ...fields };
      },
    },
    health: async () => {
      try {
        await client.ping();
        return 'ok';
      } catch {
        return 'down';
      }
    },
    close: async () => {
      subscriber.disconnect();
      client.disconnect();
    },
  };
}

function splitOnce(message: string): [string, string] {
  const at = message.indexOf(':');
  return at === -1 ? [message, ''] : [message.slice(0, at), message.slice(at + 1)];
}
