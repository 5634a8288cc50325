// Categories in Redis: one hash per environment, `portico:categories:<environment>` (field: the id,
// value: the category's JSON), and its id sequence `…:seq`. Lists are read through the in-process cache
// (redis-cache.ts) that redis.ts hands in and redis-notices.ts keeps current; a create is one script
// (CREATE_CATEGORY), so the cap holds and ids stay unique across instances.
import type { Cache } from './redis-cache.ts';
import type { RedisCommands } from './redis-commands.ts';
import { publishNotice } from './redis-notices.ts';
import type { Category, CategoryStore, Environment } from './types.ts';

// Cap check, id assignment and write in one atomic step: ids are never reused, the cap never overshot.
const CREATE_CATEGORY = `
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
local id = redis.call('INCR', KEYS[2])
-- ARGV[2] is the category's JSON without its id: '{"name":…}' → '{"id":7,"name":…}'
redis.call('HSET', KEYS[1], id, '{"id":' .. id .. ',' .. string.sub(ARGV[2], 2))
return id`;

export function openRedisCategories({ client, call, write }: RedisCommands, categoryLists: Cache<Environment, Category[]>): CategoryStore {
  client.defineCommand('porticoCreateCategory', { numberOfKeys: 2, lua: CREATE_CATEGORY });
  const scripts = client as unknown as {
    porticoCreateCategory(...args: unknown[]): Promise<number>;
  };
  const fetchList = (environment: Environment): Promise<Category[]> =>
    categoryLists.read(environment, async () => {
      const all = await client.hvals(`portico:categories:${environment}`);
      return all.map((text) => JSON.parse(text) as Category).sort((a, b) => a.id - b.id);
    });

  return {
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
      await publishNotice(client, `categories:${environment}`);
      return made;
    },
  };
}
