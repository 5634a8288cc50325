-- Appended to every wrk run of the bench: one machine-readable line with the totals and latency
-- percentiles (microseconds), read by bench/lib/wrk.ts. WRK_PACE_MS: each connection waits that long
-- between an answer and its next request (a paced, below-saturation load for latency at equal load).
local pace = tonumber(os.getenv("WRK_PACE_MS") or "")
if pace and pace > 0 then
  delay = function() return pace end
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"p50_us":%.0f,"p90_us":%.0f,"p99_us":%.0f,"max_us":%.0f,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.status, e.timeout))
end
