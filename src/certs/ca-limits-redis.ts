// CA limits in Redis, shared by every instance: one Lua script checks and takes every bucket of a
// request at once. Keys `portico:acme-limit:{<issuer id>}:<limit>:<key>` (a hash: tokens, at) share
// the issuer's hash tag, so on a Cluster the script's keys live in one slot; each expires once its
// bucket would be full again.
import type { Redis, Cluster } from 'ioredis';
import { unavailableOnError } from '../state/types.ts';
import type { Guard } from '../state/redis-cache.ts';
import { bucketKey, tokensAt, type BucketRequest, type CaLimitStore, type LimitName } from './ca-limits.ts';

// KEYS: the buckets; ARGV: now, then per key capacity, periodMs, need, take. The same arithmetic as
// applyTake() in ca-limits.ts. Answers {1} or {0, index of the blocking request, retryAt}.
const TAKE = `
local now = tonumber(ARGV[1])
local tokens = {}
local worst, retry = 0, -1
for i = 1, #KEYS do
  local capacity, period, need = tonumber(ARGV[i*4-2]), tonumber(ARGV[i*4-1]), tonumber(ARGV[i*4])
  local state = redis.call('HMGET', KEYS[i], 'tokens', 'at')
  local t = capacity
  if state[1] then
    t = math.min(capacity, tonumber(state[1]) + math.max(0, now - tonumber(state[2])) * capacity / period)
  end
  tokens[i] = t
  if t < need then
    local at = now + math.ceil((need - t) * period / capacity)
    if at > retry then worst, retry = i, at end
  end
end
if worst > 0 then return {0, worst - 1, retry} end
for i = 1, #KEYS do
  local capacity, period, take = tonumber(ARGV[i*4-2]), tonumber(ARGV[i*4-1]), tonumber(ARGV[i*4+1])
  local t = math.max(0, math.min(capacity, tokens[i] - take))
  if t >= capacity then
    redis.call('DEL', KEYS[i])
  else
    redis.call('HSET', KEYS[i], 'tokens', tostring(t), 'at', tostring(now))
    redis.call('PEXPIRE', KEYS[i], math.ceil((capacity - t) * period / capacity) + 1000)
  end
end
return {1}
`;

type Client = Redis | Cluster;

/** `call`: the state's command path (state/redis-commands.ts); a plain client's errors are STATE_UNAVAILABLE */
export function openRedisCaLimits(client: Client, call: Guard = unavailableOnError): CaLimitStore {
  client.defineCommand('porticoAcmeLimitTake', { lua: TAKE });
  const take = (client as unknown as { porticoAcmeLimitTake(n: number, ...args: Array<string | number>): Promise<[number, number?, number?]> }).porticoAcmeLimitTake.bind(client);
  const keyOf = (issuerId: string, r: BucketRequest) => `portico:acme-limit:{${issuerId}}:${bucketKey(r)}`;
  return {
    async take(issuerId, requests, now) {
      if (requests.length === 0) return { ok: true };
      const args: Array<string | number> = [requests.length, ...requests.map((r) => keyOf(issuerId, r)), now];
      for (const r of requests) args.push(r.capacity, r.periodMs, r.need, r.take);
      const answer = await call(() => take(...(args as [number, ...Array<string | number>])));
      if (answer[0] === 1) return { ok: true };
      const blocking = requests[answer[1] ?? 0];
      return { ok: false, limit: blocking.limit as LimitName, retryAt: Number(answer[2]), refillMs: blocking.periodMs / blocking.capacity };
    },
    async peek(issuerId, requests, now) {
      return Promise.all(requests.map(async (r) => {
        const [tokens, at] = await call(() => client.hmget(keyOf(issuerId, r), 'tokens', 'at'));
        return tokensAt(tokens === null ? undefined : { tokens: Number(tokens), at: Number(at) }, r, now);
      }));
    },
  };
}
