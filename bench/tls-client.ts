// Handshake load: `concurrency` loops, each opening a new TLS connection per request
// (`GET <path>` with `Connection: close`) until `seconds` pass or `maxRequests` are done.
// resume=false: no session is ever offered, so every connection is a full handshake (wrk would
// resume: it keeps the session across reconnects). resume=true: each connection offers the latest
// session/ticket received, and the share actually resumed is reported.
// Usage: node bench/tls-client.ts '<json options>'; prints one `HS_JSON {...}` line.
import tls from 'node:tls';

interface Options {
  port: number;
  servername: string;
  hostHeader: string;
  path: string;
  concurrency: number;
  seconds: number;
  maxRequests: number;
  resume: boolean;
  /** the key exchange groups offered, in order (ecdhCurve) */
  groups: string;
}

const o = JSON.parse(process.argv[2]) as Options;
const request = Buffer.from(`GET ${o.path} HTTP/1.1\r\nHost: ${o.hostHeader}\r\nUser-Agent: portico-bench\r\nConnection: close\r\n\r\n`);
const latencies: number[] = [];
let errors = 0;
let badStatus = 0;
let reused = 0;
let started = 0;
let session: Buffer | undefined;
// one context for every connection: without it each tls.connect builds its own and parses the whole
// root CA store (~3 ms of CPU here), which made the client, not the server, the measured thing
const secureContext = tls.createSecureContext({ ecdhCurve: o.groups });

function once(): Promise<void> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const socket = tls.connect({ host: '127.0.0.1', port: o.port, servername: o.servername, rejectUnauthorized: false, secureContext, session: o.resume ? session : undefined });
    // Nagle would hold the request behind the unacknowledged Finished: a 40 ms delayed-ACK stall each
    socket.setNoDelay(true);
    let head = '';
    let failed = false;
    if (o.resume) socket.on('session', (s: Buffer) => { session = s; });
    socket.once('secureConnect', () => {
      if (socket.isSessionReused()) reused++;
      // no end() here: a half-closed client can make a server drop the request unanswered
      socket.write(request);
    });
    socket.on('data', (chunk: Buffer) => {
      if (head.length < 16) head += chunk.toString('latin1', 0, 16);
    });
    socket.once('end', () => socket.end());
    socket.once('error', () => { failed = true; });
    socket.once('close', () => {
      if (failed) errors++;
      else if (!/^HTTP\/1\.[01] [23]\d\d/.test(head)) badStatus++;
      else latencies.push(performance.now() - t0);
      resolve();
    });
  });
}

const cpu0 = process.cpuUsage();
const start = performance.now();
const deadline = start + o.seconds * 1000;
await Promise.all(Array.from({ length: o.concurrency }, async () => {
  while (performance.now() < deadline && started < o.maxRequests) {
    started++;
    await once();
  }
}));
const seconds = (performance.now() - start) / 1000;
const cpu = process.cpuUsage(cpu0);
const clientCpuPct = ((cpu.user + cpu.system) / 1e6 / seconds) * 100;
latencies.sort((a, b) => a - b);
const pct = (p: number) => latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] : 0;
process.stdout.write(`HS_JSON ${JSON.stringify({ requests: latencies.length, seconds, p50ms: pct(50), p99ms: pct(99), errors, badStatus, reused, attempted: started, clientCpuPct })}\n`);
