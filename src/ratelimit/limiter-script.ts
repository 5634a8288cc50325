// The whole decision for one request in one round trip (DESIGN §4: check and count are one atomic
// step). Kept as a string constant rather than a .lua file so dist/ needs no copy step.
// The same steps, in the same order, as MemoryLimiter.consume(); headers are computed in windows.ts.
//
// KEYS[1] ban key, KEYS[2] refusal key, KEYS[3] prefix of the window keys. The window keys carry
// their start (`…:m:<unix seconds>`), and when `now` comes from TIME they can only be named inside
// the script; they share KEYS[1]'s hash tag, so in a cluster they live in the slot the call is
// routed to.
// ARGV: nowMs ('' = use TIME), perMinute, perDay, ban refusals, refusal window ms, ban ms.
// Reply: {code, minuteUsed, dayUsed, nowMs, banEndMs}; code 0 allowed, 1 refused, 2 banned;
// the used counts are from before this request.
// Every key gets a TTL when it is created; expiry is relative to the server's clock even with an
// injected `now`, so tests with a clock in the past do not write already-expired keys.
export const LIMITER_SCRIPT = `
local now = tonumber(ARGV[1])
if not now then
  -- Redis 7 replicates script effects, so TIME is allowed; one clock for every instance.
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local perMinute = tonumber(ARGV[2])
local perDay = tonumber(ARGV[3])
local maxRefusals = tonumber(ARGV[4])
local refusalWindowMs = tonumber(ARGV[5])
local banMs = tonumber(ARGV[6])

-- 1. A banned subject consumes nothing.
local banEnd = tonumber(redis.call('GET', KEYS[1]))
if banEnd and banEnd > now then
  return {2, 0, 0, now, banEnd}
end

-- 2. Both windows must have room; then both are counted.
local minuteStart = now - now % 60000
local dayStart = now - now % 86400000
local minuteKey = KEYS[3] .. 'm:' .. string.format('%d', minuteStart / 1000)
local dayKey = KEYS[3] .. 'd:' .. string.format('%d', dayStart / 1000)
local minuteUsed = tonumber(redis.call('GET', minuteKey)) or 0
local dayUsed = tonumber(redis.call('GET', dayKey)) or 0
if minuteUsed < perMinute and dayUsed < perDay then
  if redis.call('INCR', minuteKey) == 1 then
    redis.call('PEXPIRE', minuteKey, minuteStart + 60000 - now + 1000)
  end
  if redis.call('INCR', dayKey) == 1 then
    redis.call('PEXPIRE', dayKey, dayStart + 86400000 - now + 1000)
  end
  return {0, minuteUsed, dayUsed, now, 0}
end

-- 3. A refusal counts towards a ban; the refusal window opens at the first refusal.
local refusalEnd = tonumber(redis.call('HGET', KEYS[2], 'end'))
local refusals = 1
if refusalEnd and refusalEnd > now then
  refusals = redis.call('HINCRBY', KEYS[2], 'n', 1)
else
  redis.call('HSET', KEYS[2], 'n', 1, 'end', string.format('%d', now + refusalWindowMs))
  redis.call('PEXPIRE', KEYS[2], refusalWindowMs)
end
if refusals > maxRefusals then
  banEnd = now + banMs
  redis.call('SET', KEYS[1], string.format('%d', banEnd), 'PX', banMs)
  redis.call('DEL', KEYS[2])
  return {2, minuteUsed, dayUsed, now, banEnd}
end
return {1, minuteUsed, dayUsed, now, 0}
`;
