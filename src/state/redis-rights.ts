// What Portico asks of its Redis user (ACL), checked at the start. A user short of a right stopped the
// start only at the first refused command (EXEC, in the route index's load), and the next restart at
// the next one (EVALSHA, PUBLISH…), or not at all when that command came later (the limiter's first
// request): one fix per restart, with nothing naming the rule. The start now stops at once, naming the
// user, everything Redis refuses it, and the rule README gives.
import type { Redis } from 'ioredis';
import type { RedisMode } from './redis-url.ts';

/** the rule README gives Portico's Redis user: its keys and channel, every command but the dangerous ones */
export const DATA_ACL = '~portico:* ~{portico}:* &portico:* +@all -@dangerous +info';

/** one command as Portico sends it, whole (redis.acl_check_cmd('eval') without its numkeys crashed a
 * Redis 7.0.15 server), and the selector granting its key or channel */
interface Need {
  words: string[];
  rule?: string;
}

// Every command Portico sends, itself or in its scripts (which run with the user's rights), on the keys
// it sends them to. INFO is not among them: without it ioredis skips its ready check (README).
const ON_STATE_KEYS = [['get'], ['set', 'v'], ['del'], ['exists'], ['mget'], ['incr'], ['expire', '1'], ['pexpire', '1'], ['hget', 'f'], ['hset', 'f', 'v'], ['hdel', 'f'], ['hvals'], ['hmget', 'f'], ['hscan', '0'], ['hincrby', 'f', '1'], ['hlen'], ['zadd', '1', 'm'], ['zrem', 'm'], ['zrange', '0', '-1'], ['zrangebyscore', '0', '1'], ['zremrangebyscore', '0', '1'], ['zscore', 'm'], ['zcard'], ['sadd', 'm'], ['srem', 'm'], ['smembers'], ['rpush', 'v'], ['ltrim', '0', '1'], ['lrange', '0', '1']];
const ON_LIMITER_KEYS = [['get'], ['hmget', 'f'], ['hset', 'f', 'v'], ['pexpire', '1']];
const PLAIN = [['multi'], ['exec'], ['ping'], ['wait', '1', '0'], ['time']];
/** ioredis's view of the slots, and the limiter's ASKING during a reshard */
const ON_CLUSTER = [['cluster', 'slots'], ['cluster', 'info'], ['asking']];

function needs(mode: RedisMode): Need[] {
  const state = mode === 'cluster' ? { key: '{portico}:rights', rule: '~{portico}:*' } : { key: 'portico:rights', rule: '~portico:*' };
  const limiter = { key: 'portico:rl:{rights}:m', rule: '~portico:*' };
  const channel = { key: 'portico:invalidate', rule: '&portico:*' };
  const on = ({ key, rule }: { key: string; rule: string }) => ([name, ...rest]: string[]): Need => ({ words: [name, key, ...rest], rule });
  return [
    ...ON_STATE_KEYS.map(on(state)),
    ...ON_LIMITER_KEYS.map(on(limiter)),
    // a script (or its sha) on one key
    ...[state, limiter].flatMap(({ key, rule }) => [{ words: ['eval', 'return 0', '1', key], rule }, { words: ['evalsha', '0'.repeat(40), '1', key], rule }]),
    on(channel)(['publish', 'x']),
    on(channel)(['subscribe']),
    ...[...PLAIN, ...(mode === 'cluster' ? ON_CLUSTER : [])].map((words) => ({ words })),
  ];
}

// redis.acl_check_cmd (Redis 7.0): whether the user may run a command, on the keys and channels it
// names, without running it. A command this server does not know is passed over; before 7.0 the
// script does not compile (or the function is missing) and nothing is checked here: the start's own
// commands still stop it on a refusal.
const CHECK = `#!lua flags=no-writes
if not redis.acl_check_cmd then return false end
local out = {}
for i, words in ipairs(cjson.decode(ARGV[1])) do
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(words))
  if ok and not allowed then out[#out + 1] = i end
end
return out`;

/**
 * What `client`'s user may not do of what Portico needs: the commands refused ("exec", "cluster|slots"),
 * and the selectors of the keys and channels it may not touch ("~portico:*"). Checked on the server
 * it is connected to (on a Cluster, one of the primaries); empty when nothing is refused or the server
 * cannot tell. Rejects with the server's NOPERM when the user may not even run the check (EVAL).
 */
export async function refusedRights(client: Redis, mode: RedisMode): Promise<string[]> {
  const list = needs(mode);
  let reply: unknown;
  try {
    reply = await client.eval(CHECK, 0, JSON.stringify(list.map((need) => need.words)));
  } catch (err) {
    if (refusalIn(err) !== null) throw err;
    return [];
  }
  if (!Array.isArray(reply)) return [];
  const refused = new Set(reply.map((at) => list[Number(at) - 1]).filter((need) => need !== undefined));
  // a selector the user lacks refuses every command on its keys: named instead of them (the check
  // cannot ask for the command alone, see Need)
  const selectors = new Set(list.flatMap((need) => (need.rule ? [need.rule] : [])));
  for (const need of list) if (need.rule && !refused.has(need)) selectors.delete(need.rule);
  const commands = new Set<string>();
  for (const need of refused) {
    if (need.rule && selectors.has(need.rule)) continue;
    commands.add(need.words[0] === 'cluster' ? need.words.slice(0, 2).join('|') : need.words[0]);
  }
  return [...commands, ...selectors];
}

/** a NOPERM from Redis in `err`, in its message, its cause or (a Cluster's failed slot refresh) its last node's error */
export function refusalIn(err: unknown): string | null {
  for (let e = err as { message?: unknown; cause?: unknown; lastNodeError?: unknown } | null | undefined, depth = 0; e && depth < 5; depth++) {
    const message = typeof e.message === 'string' ? e.message : '';
    const at = message.indexOf('NOPERM');
    if (at !== -1) return message.slice(at);
    e = (e.lastNodeError ?? e.cause) as typeof e;
  }
  return null;
}

/** before the rule, for a user that has some already: a pattern added after `~*` (or `&*`) is an error */
const RESET = 'resetkeys resetchannels';
/** refused commands named in the error; the others are counted */
const NAMED = 8;

/**
 * The start's one error for a Redis user short of rights: the user, what Redis refused (its NOPERM, or
 * what `refusedRights` found), and the rule to give it.
 */
export function rightsError(username: string | undefined, refusal: string | string[]): Error {
  const user = username ?? 'default';
  return Object.assign(
    new Error(`the Redis user "${user}" lacks rights Portico needs (${typeof refusal === 'string' ? refusal : listed(refusal)}); give it, on every Redis server (ACLs are not replicated): ACL SETUSER ${user} ${RESET} ${DATA_ACL}`),
    { code: 'REDIS_NOPERM' },
  );
}

function listed(rights: string[]): string {
  const selectors = rights.filter((right) => /^[~&]/.test(right));
  const commands = rights.filter((right) => !selectors.includes(right));
  const named = commands.length > NAMED ? `${commands.slice(0, NAMED).join(', ')} and ${commands.length - NAMED} more` : commands.join(', ');
  return `NOPERM for ${[...(named ? [named] : []), ...selectors].join(', ')}`;
}
