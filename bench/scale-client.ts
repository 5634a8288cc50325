// Handshakes for the 100k-domain scenario: TLS handshakes only (connect → secureConnect → close, no
// session offered, no request), each to the hostname it is given, and the time from tls.connect()
// to secureConnect. Checks that the certificate served is the stored one (its CN), not the fallback.
//   mode "alternate": for each hostname in `cold`, one handshake to it, then one to `warm` (sequential,
//     so neither waits behind the other; the warm figure is the same handshake with the lookup cached)
//   mode "bulk": `concurrency` loops over the hostnames (each once; or `count` times to `warm` when
//     given), for RSS and server CPU per handshake
//   mode "probe": one handshake to `warm` every `intervalMs` for `seconds`: the longest ones show
//     when the server's event loop was blocked (the certificate sweep runs every 60 s)
// Usage: node bench/scale-client.ts '<json options>'; prints one `SCALE_JSON {...}` line.
import tls from 'node:tls';

interface Options {
  port: number;
  mode: 'alternate' | 'bulk' | 'probe';
  seconds?: number;
  intervalMs?: number;
  /** hostnames are `${prefix}${index padded to 6}${suffix}` for index in [from, from + count) */
  prefix: string;
  suffix: string;
  from: number;
  count: number;
  warm?: string;
  concurrency?: number;
  expectCN: string;
}

const o = JSON.parse(process.argv[2]) as Options;
const hostname = (i: number) => `${o.prefix}${String(i).padStart(6, '0')}${o.suffix}`;
// one client context: a fresh one per connection parses the root CA store (~3 ms of client CPU)
const secureContext = tls.createSecureContext({});
let errors = 0;
let wrongCertificate = 0;
let lastError = '';

function handshake(servername: string): Promise<number | null> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const socket = tls.connect({ host: '127.0.0.1', port: o.port, servername, rejectUnauthorized: false, secureContext });
    socket.setNoDelay(true);
    let done = false;
    const finish = (ms: number | null) => {
      if (done) return;
      done = true;
      socket.destroy();
      resolve(ms);
    };
    socket.once('secureConnect', () => {
      const ms = performance.now() - t0;
      if (String(socket.getPeerCertificate().subject?.CN) !== o.expectCN) {
        wrongCertificate++;
        finish(null);
      } else finish(ms);
    });
    socket.once('error', (err) => {
      errors++;
      lastError = err.message;
      finish(null);
    });
    socket.setTimeout(30_000, () => {
      errors++;
      lastError = 'timeout';
      finish(null);
    });
  });
}

function summary(ms: number[]) {
  const s = [...ms].sort((a, b) => a - b);
  const pct = (p: number) => (s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN);
  return { n: s.length, p50ms: pct(50), p99ms: pct(99), maxms: s.length ? s[s.length - 1] : NaN, meanms: s.length ? s.reduce((a, b) => a + b, 0) / s.length : NaN };
}

const cold: number[] = [];
const warm: number[] = [];
const bulk: number[] = [];
const stalls: Array<{ at: number; ms: number }> = [];
const start = performance.now();
if (o.mode === 'alternate') {
  if (!o.warm) throw new Error('alternate needs a warm hostname');
  for (let k = 0; k < 3; k++) await handshake(o.warm);
  for (let i = o.from; i < o.from + o.count; i++) {
    const c = await handshake(hostname(i));
    if (c !== null) cold.push(c);
    const w = await handshake(o.warm);
    if (w !== null) warm.push(w);
  }
} else if (o.mode === 'probe') {
  if (!o.warm) throw new Error('probe needs a warm hostname');
  const until = start + (o.seconds ?? 65) * 1000;
  while (performance.now() < until) {
    const at = (performance.now() - start) / 1000;
    const ms = await handshake(o.warm);
    if (ms !== null) {
      bulk.push(ms);
      if (ms > 100) stalls.push({ at, ms });
    }
    await new Promise((r) => setTimeout(r, o.intervalMs ?? 20));
  }
} else {
  let next = o.from;
  await Promise.all(Array.from({ length: o.concurrency ?? 8 }, async () => {
    while (next < o.from + o.count) {
      const ms = await handshake(o.warm ?? hostname(next++));
      if (o.warm) next++;
      if (ms !== null) bulk.push(ms);
    }
  }));
}
const seconds = (performance.now() - start) / 1000;
process.stdout.write(`SCALE_JSON ${JSON.stringify({ seconds, cold: summary(cold), warm: summary(warm), bulk: summary(bulk), stalls, errors, wrongCertificate, lastError })}\n`);
