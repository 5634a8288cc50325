// The bare Node anchors as processes on the server core: bench/bare-https.ts (a server answering a
// fixed body itself; SERVER=h2 for Portico's listener kind) and bench/bare-proxy.ts (that listener
// and an undici pool to the origin, nothing else).
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { portFromStdout, spawnPinned, type Spawned } from './proc.ts';
import { expectStatus, get } from './check.ts';
import type { Portico } from './portico.ts';

const BENCH = path.resolve(import.meta.dirname, '..');

export interface Bare {
  process: Spawned;
  port: number;
}

/** A command the anchor's Node runs under (valgrind for the instructions scenario), and how long it may take to start */
export interface Under {
  wrapper?: string[];
  timeoutMs?: number;
}

/** How the bare server answers: after the /v1 rate-limit call on `redisUrl` (the floor of a /v1 request on Redis), or after the turn's reads */
export interface BareAnswer {
  redisUrl?: string;
  afterReads?: boolean;
}

/**
 * `kind` h2: http2.createSecureServer({allowHTTP1}), else https.createServer; answers `body` to every
 * request, at once unless `answer` says otherwise
 */
export async function startBareServer(name: string, dir: string, cpus: string | null, portico: Portico, body: Buffer, kind: 'h2' | 'https', answer: BareAnswer = {}, under: Under = {}): Promise<Bare> {
  const bodyFile = path.join(dir, `${name}.body`);
  writeFileSync(bodyFile, body);
  const [command, ...args] = [...(under.wrapper ?? []), process.execPath, path.join(BENCH, 'bare-https.ts')];
  const p = spawnPinned(name, cpus, command, args, {
    env: { ...process.env, CERT_FILE: portico.certFile, KEY_FILE: portico.keyFile, BODY_FILE: bodyFile, SERVER: kind === 'h2' ? 'h2' : '', REDIS_URL: answer.redisUrl ?? '', AFTER_READS: answer.afterReads ? '1' : '' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await portFromStdout(p, under.timeoutMs);
  const first = await expectStatus(name, get({ scheme: 'https', port, hostname: 'bench.localhost', path: '/' }), 200);
  if (!first.body.equals(body)) throw new Error(`${name} does not answer the body it was given`);
  return { process: p, port };
}

/** `nodeArgs`: Node flags for the proxy's process (none: Node's defaults, as an operator would run it) */
export async function startBareProxy(cpus: string | null, portico: Portico, originPort: number, nodeArgs: string[] = [], under: Under = {}): Promise<Bare> {
  const [command, ...args] = [...(under.wrapper ?? []), process.execPath, ...nodeArgs, path.join(BENCH, 'bare-proxy.ts')];
  const p = spawnPinned('bare-proxy', cpus, command, args, {
    env: { ...process.env, CERT_FILE: portico.certFile, KEY_FILE: portico.keyFile, ORIGIN: `http://127.0.0.1:${originPort}` },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await portFromStdout(p, under.timeoutMs);
  const answer = await expectStatus('bare undici proxy', get({ scheme: 'https', port, hostname: 'bench.localhost', path: '/' }), 200);
  if (answer.body.length !== 100) throw new Error('bare undici proxy does not pass the origin body through');
  return { process: p, port };
}
