// Runs bench/tls-client.ts as its own process (on the load side's cores) and reads its summary.
import path from 'node:path';
import type { LoadResult } from './wrk.ts';
import { output, wrap } from './proc.ts';

const CLIENT = path.join(import.meta.dirname, '..', 'tls-client.ts');

export interface HandshakeRun {
  port: number;
  servername: string;
  hostHeader: string;
  path: string;
  concurrency: number;
  seconds: number;
  maxRequests: number;
  resume: boolean;
  /** the key exchange groups offered (tls.connect's ecdhCurve) */
  groups: string;
  cpus: string | null;
}

export async function runHandshakes(run: HandshakeRun): Promise<LoadResult> {
  const { cpus, ...options } = run;
  const [cmd, argv] = wrap(cpus, process.execPath, [CLIENT, JSON.stringify(options)]);
  const out = await output(cmd, argv, 'handshake client');
  const line = out.split('\n').find((l) => l.startsWith('HS_JSON '));
  if (!line) throw new Error(`handshake client printed no summary:\n${out}`);
  const r = JSON.parse(line.slice('HS_JSON '.length));
  const parts = [r.errors ? `tls/socket ${r.errors}` : '', r.badStatus ? `bad status ${r.badStatus}` : ''].filter(Boolean);
  return {
    requests: r.requests,
    seconds: r.seconds,
    rps: r.requests / r.seconds,
    p50ms: r.p50ms,
    p99ms: r.p99ms,
    errors: r.errors + r.badStatus,
    errorDetail: parts.join(', '),
    info: `client: resumed ${Math.round((r.reused / Math.max(1, r.attempted)) * 100)}%, its CPU ${Math.round(r.clientCpuPct)}%`,
  };
}
