// API keys in Redis: the key under `portico:key:<id>`, its id under `portico:keyhash:<hash>`. A lookup
// by hash goes through the in-process cache (redis-cache.ts) that redis.ts hands in and
// redis-notices.ts keeps current; a revocation is one script (REVOKE_KEY) and its notice says when,
// so an instance that holds the key keeps it as revoked through an outage that starts right after.
import type { Cache } from './redis-cache.ts';
import type { RedisCommands } from './redis-commands.ts';
import { CHANNEL, publishNotice } from './redis-notices.ts';
import type { ApiKey, KeyStore } from './types.ts';

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

export function openRedisKeys({ client, call, write }: RedisCommands, keyCache: Cache<string, ApiKey | null>): KeyStore {
  client.defineCommand('porticoRevokeKey', { numberOfKeys: 1, lua: REVOKE_KEY });
  const scripts = client as unknown as {
    porticoRevokeKey(key: string, at: string): Promise<string | null>;
  };
  const findByHash = (hash: string): Promise<ApiKey | null> =>
    keyCache.read(hash, async () => {
      const id = await client.get(`portico:keyhash:${hash}`);
      const text = id === null ? null : await client.get(`portico:key:${id}`);
      return text === null ? null : (JSON.parse(text) as ApiKey);
    });

  return {
    create: async (key) => {
      await write(() => client.multi().set(`portico:key:${key.id}`, JSON.stringify(key)).set(`portico:keyhash:${key.hash}`, key.id).exec());
      // any instance, this one too, may hold "unknown" for this hash; on a Cluster a notice arrives
      // through the cluster bus, after the write's answer
      keyCache.put(key.hash, key);
      await publishNotice(client, `key:${key.hash}`);
    },
    get: async (id) => {
      const text = await call(() => client.get(`portico:key:${id}`));
      return text === null ? null : (JSON.parse(text) as ApiKey);
    },
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
  };
}
