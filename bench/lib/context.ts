// What every scenario is given: the servers the runner started (Portico, nginx, the origin, Redis, the
// bare Node anchors), the load generators bound to this run's cores, and a place to note what it skips.
import { existsSync, truncateSync } from 'node:fs';
import { processTree, type Pinning, type Spawned } from './proc.ts';
import { runWrk, type LoadResult, type Resolution } from './wrk.ts';
import { runHandshakes } from './tls-load.ts';
import { h2loadLog, runH2load } from './h2load.ts';
import type { Nginx } from './nginx.ts';
import type { Origin } from './origin.ts';
import type { Portico } from './portico.ts';
import { CONNECTIONS, H2_CLIENTS, H2_STREAMS, HANDSHAKE_CONCURRENCY, HANDSHAKE_GROUPS } from './settings.ts';

export interface Tools {
  wrk: boolean;
  nginx: boolean;
  redis: boolean;
  h2load: boolean;
}

/** A load run: `seconds` long; `mark` is told where its measured window starts and ends, when it has a warm-up inside */
export type Load = (seconds: number, mark?: (at: 'start' | 'end') => void) => Promise<LoadResult>;

export interface BenchContext {
  tmp: string;
  cores: number;
  pinning: Pinning;
  tools: Tools;
  resolution: Resolution;
  /** the loopback origin (nginx answering itself, else bench/origin.ts), on the load core */
  origin: Origin;
  redisUrl: string | undefined;
  certsDir: string;
  /** the Portico under test (Redis state when redis-server is there) with the `bench` project and an API key */
  portico: Portico;
  auth: Record<string, string>;
  /** the /v1/categories answer the bare server gives too */
  v1Body: Buffer;
  /** BENCH_VARIANT's second Portico, sharing the first one's state */
  variant: Portico | undefined;
  /** a Portico on embedded state with the same account and categories (scenario b's informational row) */
  embedded: { portico: Portico; auth: Record<string, string> } | undefined;
  nginx: Nginx | undefined;
  /** bench/bare-https.ts answering the /v1 body itself */
  bare: { process: Spawned; port: number };
  /** bench/bare-https.ts making /v1's one rate-limit call on `redisUrl` before it answers (undefined without Redis) */
  bareLimited: { process: Spawned; port: number } | undefined;
  /** bench/bare-https.ts answering after the turn's reads, as Portico answers /v1 (scenario b's informational row) */
  bareAfterReads: { process: Spawned; port: number } | undefined;
  /** bench/bare-proxy.ts: Portico's listener kind and an undici pool, nothing else */
  bareProxy: { process: Spawned; port: number };
  /** why (part of) a scenario did not run, for the summary */
  skip(note: string): void;
}

export const pidsOf = (p: Spawned) => () => processTree(p.pid);

export const truncate = (file: string) => () => {
  if (existsSync(file)) truncateSync(file, 0);
};

/** Portico's and nginx's access logs emptied before a measurement, so each holds one run's lines. */
export const clearLogs = (ctx: BenchContext) => () => {
  truncate(ctx.portico.logFile)();
  if (ctx.nginx) truncate(ctx.nginx.accessLog)();
};

export function wrk(ctx: BenchContext, port: number, hostname: string, urlPath: string, extra: { scheme?: 'http' | 'https'; headers?: Record<string, string>; paceMs?: number } = {}): Load {
  return (seconds) => runWrk({ scheme: extra.scheme ?? 'https', hostname, port, path: urlPath, headers: extra.headers, connections: CONNECTIONS, seconds, cpus: ctx.pinning.client, resolution: ctx.resolution, paceMs: extra.paceMs });
}

export function handshakes(ctx: BenchContext, port: number, hostname: string, urlPath: string, resume: boolean): Load {
  return (seconds) => runHandshakes({ port, servername: hostname, hostHeader: hostname, path: urlPath, concurrency: HANDSHAKE_CONCURRENCY, seconds, maxRequests: 250_000, resume, groups: HANDSHAKE_GROUPS, cpus: ctx.pinning.client });
}

/** h2load to `port` (ALPN h2, or HTTP/1.1 over TLS with `h1`), SNI and :authority `hostname` */
export function h2load(ctx: BenchContext, port: number, name: string, opts: { hostname?: string; path?: string; clients?: number; streams?: number; rps?: number; h1?: boolean } = {}): Load {
  return (seconds, mark) => runH2load({ hostname: opts.hostname ?? 'bench.localhost', port, path: opts.path ?? '/', clients: opts.clients ?? H2_CLIENTS, streams: opts.streams ?? H2_STREAMS, rps: opts.rps, h1: opts.h1, seconds, cpus: ctx.pinning.client, logFile: h2loadLog(ctx.tmp, name) }, mark);
}
