// The bench's settings, from the environment (docs/performance.md lists them). Read once at start.
export const QUICK = process.env.BENCH_QUICK === '1';
export const SECONDS = Number(process.env.BENCH_SECONDS ?? (QUICK ? 5 : 15));
export const REPEATS = Number(process.env.BENCH_REPEATS ?? (QUICK ? 1 : 3));
// 1 s left Portico's first measured scenario ~30 % below its later ones (JIT tiers, heap still
// growing): the first repeat of a quick run measured warm-up, not the server
export const WARMUP = Number(process.env.BENCH_WARMUP ?? 3);
export const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
export const HANDSHAKE_CONCURRENCY = 32;
// scenario p: each connection's pause between an answer and its next request (≈ CONNECTIONS × 1000 ÷ PACE_MS req/s offered)
export const PACE_MS = Number(process.env.BENCH_PACE_MS ?? 20);
// HTTP/2: h2load -c H2_CLIENTS -m H2_STREAMS (streams in flight per connection)
export const H2_CLIENTS = CONNECTIONS;
export const H2_STREAMS = Number(process.env.BENCH_H2_STREAMS ?? 10);
// HTTP/2 stalled streams (RSS): streams opened and never read
export const H2_STALLED = Number(process.env.BENCH_H2_STALLED ?? 1000);
// The key exchange the handshake client offers. nginx 1.22 on OpenSSL 3.0 has no ML-KEM, so the
// anchored figure offers X25519 only and both servers do the same work; BENCH_TLS_GROUPS=X25519MLKEM768:X25519
// offers the hybrid post-quantum exchange first, as browsers do, which Portico then picks.
export const HANDSHAKE_GROUPS = process.env.BENCH_TLS_GROUPS || 'X25519';
export const VARIANT_ENTRY = process.env.BENCH_VARIANT_ENTRY || undefined;
export const VARIANT_NODE_ARGS = (process.env.BENCH_VARIANT_NODE_ARGS ?? '').trim().split(/\s+/).filter(Boolean);
/** BENCH_VARIANT='NAME=value …' (or a variant entry or Node flags): a second Portico measured interleaved */
export const VARIANT = process.env.BENCH_VARIANT || VARIANT_ENTRY || VARIANT_NODE_ARGS.length
  ? Object.fromEntries((process.env.BENCH_VARIANT ?? '').trim().split(/\s+/).filter(Boolean).map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)])) as Record<string, string>
  : null;
export const PROFILE = process.env.BENCH_PROFILE === '1' ? 'proxy' : process.env.BENCH_PROFILE ?? '';
