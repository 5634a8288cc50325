// h2load (Debian `nghttp2-client`) runs for the HTTP/2 scenario. h2load sends the URI's host as SNI
// and :authority, and `--connect-to` sends the connection to 127.0.0.1 without resolving that host,
// so the real name reaches the server with no hosts-file trick (unlike wrk, see wrk.ts).
// p50/p99 come from h2load's per-request `--log-file` (start µs, status, µs until the end of the
// response); its own summary only has min/mean/max/sd of "time for request".
// h2load runs its own 1 s warm-up (`--warm-up-time`): without one, `-D` can hang — connections whose
// handshake finishes after the duration ended keep sending requests for ever (seen with h2load 1.52,
// -c50 against a busy server). Requests, the log and req/s then cover the main duration only, and
// `mark` is called as h2load announces its start and end, so the caller reads CPU over the same window.
// `-T` closes any connection still open well after the end, so a run can never hang.
import { spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { wrap } from './proc.ts';
import type { LoadResult } from './wrk.ts';

export interface H2loadRun {
  hostname: string;
  port: number;
  path: string;
  headers?: Record<string, string>;
  /** connections (-c) */
  clients: number;
  /** concurrent streams per connection (-m) */
  streams: number;
  /** requests per second per connection (--rps): paced load */
  rps?: number;
  /** HTTP/1.1 over TLS (--h1) instead of h2 */
  h1?: boolean;
  seconds: number;
  cpus: string | null;
  /** where the per-request log goes (deleted after reading) */
  logFile: string;
}

const WARMUP_SECONDS = 1;

export async function runH2load(run: H2loadRun, mark?: (at: 'start' | 'end') => void): Promise<LoadResult> {
  const args = ['-t', '1', '-c', String(run.clients), '-m', String(run.streams), '-D', String(run.seconds), `--warm-up-time=${WARMUP_SECONDS}`, '-T', String(run.seconds + WARMUP_SECONDS + 10), `--connect-to=127.0.0.1:${run.port}`, `--log-file=${run.logFile}`];
  if (run.rps !== undefined) args.push(`--rps=${run.rps}`);
  if (run.h1) args.push('--h1');
  for (const [name, value] of Object.entries(run.headers ?? {})) args.push('-H', `${name}: ${value}`);
  args.push(`https://${run.hostname}:${run.port}${run.path}`);
  const [cmd, argv] = wrap(run.cpus, 'h2load', args);
  rmSync(run.logFile, { force: true });
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    let started = false;
    let ended = false;
    child.stdout.on('data', (d: Buffer) => {
      text += d;
      if (!started && text.includes('Main benchmark duration is started')) {
        started = true;
        mark?.('start');
      }
      if (!ended && text.includes('Main benchmark duration is over')) {
        ended = true;
        mark?.('end');
      }
    });
    child.stderr.on('data', (d: Buffer) => { text += d; });
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(text) : reject(new Error(`h2load exited with ${code}:\n${text.slice(-2000)}`))));
  });
  const finished = /finished in ([\d.]+)(s|ms|us), ([\d.]+) req\/s/.exec(out);
  const counts = /requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(out);
  const codes = /status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/.exec(out);
  const protocol = /Application protocol: (\S+)/.exec(out)?.[1] ?? '?';
  if (!finished || !counts || !codes) throw new Error(`h2load printed no summary:\n${out.slice(-2000)}`);
  // "finished in" includes the warm-up; its req/s and the counts are the main duration's
  const seconds = run.seconds;
  const succeeded = Number(counts[4]);
  const [failed, errored, timeout] = [Number(counts[5]), Number(counts[6]), Number(counts[7])];
  const bad = Number(codes[3]) + Number(codes[4]);
  // per-request times of the successful responses, from the log (one row per finished stream)
  const times: number[] = [];
  for (const line of readFileSync(run.logFile, 'utf8').split('\n')) {
    const [, status, us] = line.split('\t');
    if (us !== undefined && Number(status) >= 200 && Number(status) < 400) times.push(Number(us));
  }
  rmSync(run.logFile, { force: true });
  times.sort((a, b) => a - b);
  const pct = (p: number) => (times.length ? times[Math.min(times.length - 1, Math.floor((p / 100) * times.length))] / 1000 : NaN);
  const ok = succeeded - bad;
  const parts = [failed ? `failed ${failed}` : '', errored ? `errored ${errored}` : '', timeout ? `timeout ${timeout}` : '', bad ? `non-2xx/3xx ${bad}` : ''].filter(Boolean);
  return {
    requests: ok,
    seconds,
    rps: ok / seconds,
    p50ms: pct(50),
    p99ms: pct(99),
    errors: failed + errored + timeout + bad,
    errorDetail: parts.join(', '),
    info: `protocol ${protocol}${protocol === (run.h1 ? 'http/1.1' : 'h2') ? '' : ` (NOT ${run.h1 ? 'http/1.1' : 'h2'})`}, ${run.clients}×${run.streams} streams${run.rps ? `, ${run.rps} req/s each` : ''}`,
  };
}

export const h2loadLog = (dir: string, name: string) => path.join(dir, `h2load-${name.replace(/[^a-z0-9]+/gi, '-')}.log`);
