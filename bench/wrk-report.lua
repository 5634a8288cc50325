-- Appended to every wrk run of the bench: one machine-readable line with the totals and latency
-- percentiles (microseconds), read by bench/lib/wrk.ts.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"p50_us":%.0f,"p90_us":%.0f,"p99_us":%.0f,"max_us":%.0f,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.status, e.timeout))
end
