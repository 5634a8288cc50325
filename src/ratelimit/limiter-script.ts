// The whole decision for one request in one round trip (DESIGN §4: check and count are one atomic
// step). Kept as a string constant rather than a .lua file so dist/ needs no copy step.
// The same steps, in the same order, as MemoryLimiter.consume(); headers are computed in windows.ts.
//
// KEYS[1] is the subject's only key, a hash holding all of its state (ms are this call's clock):
//   ban                   ban end
//   refusals, refusalEnd  refusals counted in the refusal window, and its end
//   minute, minuteUsed    minute window start, and the calls allowed in it
//   day, dayUsed          day window start, and the calls allowed in it
// One declared key is what lets a Cluster serve the call while the key's slot migrates: the old owner
// runs it while the key is there, and after -ASK the new owner does (with ASKING). With several keys,
// or keys the script names itself, the old owner answers -ASK as soon as one is missing and the new
// one -TRYAGAIN: every call of the subject failed until the slot had moved (Redis Cluster
// specification, "ASK redirection" and "Multi-keys operations").
// ARGV: nowMs ('' = use TIME), perMinute, perDay, ban refusals, refusal window ms, ban ms.
// Reply: {code, minuteUsed, dayUsed, nowMs, banEndMs}; code 0 allowed, 1 refused, 2 banned;
// the used counts are from before this request.
// The key's TTL is set when a field that outlives it is written (a new day window, a ban, a refusal
// window) and covers the longest-lived field: all that is in it has ended when it expires. Expiry is
// relative to the server's clock even with an injected `now`, so tests with a clock in the past do not
// write already-expired keys. The commands of an allowed call: TIME (unless `now` is given), HMGET,
// HSET, and PEXPIRE on the first call of a day.
//
// Upgrade: the layout before kept one key per counter (`…:ban`, `…:ref`, `…:m:<start s>`,
// `…:d:<start s>`, KEYS[1] followed by these, in the same slot). While a subject has no hash yet they
// are read once and carried into it; they expire by themselves within a day (a ban at its end).
export const LIMITER_SCRIPT = `
local key = KEYS[1]
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
local minuteStart = now - now % 60000
local dayStart = now - now % 86400000

local function ms(n)
  return string.format('%d', n)
end

-- Expires the key once the last of these instants (ms, this call's clock) is over.
local function keepUntil(dayStarted, banEnd, refusalEnd)
  local last = math.max(banEnd or 0, refusalEnd or 0)
  if dayStarted then last = math.max(last, dayStarted + 86400000 + 1000) end
  redis.call('PEXPIRE', key, math.max(last - now, 1))
end

local s = redis.call('HMGET', key, 'ban', 'refusals', 'refusalEnd', 'minute', 'minuteUsed', 'day', 'dayUsed')
if not (s[1] or s[2] or s[3] or s[4] or s[5] or s[6] or s[7]) then
  local old = key .. ':'
  local ref = redis.call('HMGET', old .. 'ref', 'n', 'end')
  local m = redis.call('GET', old .. 'm:' .. ms(minuteStart / 1000))
  local d = redis.call('GET', old .. 'd:' .. ms(dayStart / 1000))
  s = {redis.call('GET', old .. 'ban'), ref[1], ref[2], m and minuteStart, m, d and dayStart, d}
  if s[1] or s[2] or m or d then
    redis.call('HSET', key, 'ban', s[1] or 0, 'refusals', s[2] or 0, 'refusalEnd', s[3] or 0,
      'minute', ms(minuteStart), 'minuteUsed', m or 0, 'day', ms(dayStart), 'dayUsed', d or 0)
    keepUntil(dayStart, tonumber(s[1]), tonumber(s[3]))
  end
end
local banEnd = tonumber(s[1])
local refusals = tonumber(s[2]) or 0
local refusalEnd = tonumber(s[3])
local minuteUsed = tonumber(s[5]) or 0
local day = tonumber(s[6])
local dayUsed = tonumber(s[7]) or 0
if tonumber(s[4]) ~= minuteStart then minuteUsed = 0 end
if day ~= dayStart then dayUsed = 0 end

-- 1. A banned subject consumes nothing.
if banEnd and banEnd > now then
  return {2, 0, 0, now, banEnd}
end

-- 2. Both windows must have room; then both are counted.
if minuteUsed < perMinute and dayUsed < perDay then
  redis.call('HSET', key, 'minute', ms(minuteStart), 'minuteUsed', minuteUsed + 1, 'day', ms(dayStart), 'dayUsed', dayUsed + 1)
  if day ~= dayStart then keepUntil(dayStart, banEnd, refusalEnd) end
  return {0, minuteUsed, dayUsed, now, 0}
end

-- 3. A refusal counts towards a ban; the refusal window opens at the first refusal.
local opened = false
if refusalEnd and refusalEnd > now then
  refusals = refusals + 1
else
  refusals = 1
  refusalEnd = now + refusalWindowMs
  opened = true
end
if refusals > maxRefusals then
  banEnd = now + banMs
  redis.call('HSET', key, 'ban', ms(banEnd), 'refusals', 0, 'refusalEnd', 0)
  keepUntil(day, banEnd, 0)
  return {2, minuteUsed, dayUsed, now, banEnd}
end
redis.call('HSET', key, 'refusals', refusals, 'refusalEnd', ms(refusalEnd))
if opened then keepUntil(day, banEnd, refusalEnd) end
return {1, minuteUsed, dayUsed, now, 0}
`;
