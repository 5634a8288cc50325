// Categories in Redis: one hash per environment, `portico:categories:<environment>` (field: the id,
// value: the category's JSON), and its id sequence `…:seq`. Lists are read through the in-process cache
// (redis-cache.ts) that redis.ts hands in and redis-notices.ts keeps current; a create is one script
// (CREATE_CATEGORY), so the cap holds and ids stay unique across instances. A create under an
// idempotency key remembers it in the hash `…:once` in the same script (on a Cluster every state key
// shares one slot, cluster-state.ts).
import type { Cache } from './redis-cache.ts';
import type { RedisCommands } from './redis-commands.ts';
import { publishNotice } from './redis-notices.ts';
import { IDEMPOTENCY_TTL_MS, idempotencyId, type Category, type CategoryStore, type Environment } from './types.ts';

// Cap check, id assignment and write in one atomic step: ids are never reused, the cap never overshot.
const CREATE_CATEGORY = `
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
local id = redis.call('INCR', KEYS[2])
-- ARGV[2] is the category's JSON without its id: '{"name":…}' → '{"id":7,"name":…}'
redis.call('HSET', KEYS[1], id, '{"id":' .. id .. ',' .. string.sub(ARGV[2], 2))
return id`;

// The same under an idempotency key, in the same step. The keys used are fields of one hash per
// environment, KEYS[3] (field: the key's digest, ARGV[3]; value: `<id>\n<ms>\n<sha1 of the fields>`),
// not a key each: on a Cluster a script touching a key that exists nowhere gets -TRYAGAIN for as long
// as its slot is being resharded, and the state slot then moves every key it holds, one per create
// otherwise. The hash needs no expiry: it gains a field only with a new category, and categories are
// capped. A key seen within ARGV[4] ms returns {-1} when its fields differ, or {-2, category} (the one
// it made); else the create's answer, {id} or {0} (full: nothing remembered).
const CREATE_CATEGORY_ONCE = `
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local fields = redis.sha1hex(ARGV[2])
local seen = redis.call('HGET', KEYS[3], ARGV[3])
if seen then
  local a = string.find(seen, '\\n', 1, true)
  local b = string.find(seen, '\\n', a + 1, true)
  if ms - tonumber(string.sub(seen, a + 1, b - 1)) < tonumber(ARGV[4]) then
    if string.sub(seen, b + 1) ~= fields then return {-1} end
    local made = redis.call('HGET', KEYS[1], string.sub(seen, 1, a - 1))
    if made then return {-2, made} end
  end
end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[1]) then return {0} end
local id = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], id, '{"id":' .. id .. ',' .. string.sub(ARGV[2], 2))
redis.call('HSET', KEYS[3], ARGV[3], id .. '\\n' .. ms .. '\\n' .. fields)
return {id}`;

export function openRedisCategories({ client, call, write }: RedisCommands, categoryLists: Cache<Environment, Category[]>): CategoryStore {
  client.defineCommand('porticoCreateCategory', { numberOfKeys: 2, lua: CREATE_CATEGORY });
  client.defineCommand('porticoCreateCategoryOnce', { numberOfKeys: 3, lua: CREATE_CATEGORY_ONCE });
  const scripts = client as unknown as {
    porticoCreateCategory(...args: unknown[]): Promise<number>;
    porticoCreateCategoryOnce(...args: unknown[]): Promise<[number, string?]>;
  };
  /** a category this instance made: in its cached list at once, and told to the others */
  const made = async (environment: Environment, category: Category): Promise<Category> => {
    // the newest this instance has seen, should Redis go away before the list is read again
    categoryLists.amendStale(environment, (list) => (list.some((c) => c.id === category.id) ? list : [...list, category]));
    await publishNotice(client, `categories:${environment}`);
    return category;
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
      return made(environment, { id, ...fields });
    },
    createOnce: async (environment, fields, cap, once) => {
      const [id, replayed] = await write(() =>
        scripts.porticoCreateCategoryOnce(
          `portico:categories:${environment}`,
          `portico:categories:${environment}:seq`,
          `portico:categories:${environment}:once`,
          cap,
          JSON.stringify(fields),
          idempotencyId(once),
          IDEMPOTENCY_TTL_MS,
        ),
      );
      if (id === -1) return 'key_reused';
      if (id === -2) return { replayed: JSON.parse(replayed!) as Category };
      if (id === 0) return 'full';
      return made(environment, { id, ...fields });
    },
  };
}
