// The loopback origin every proxy scenario forwards to, on the load core. With nginx installed it is
// an nginx answering a fixed 100-byte body itself (`return 200`), else bench/origin.ts (node:http).
//
// Why nginx: wrk and the origin share the load core. With the Node origin that core saturates near
// 30,000 req/s, so nginx under test idled at 70–78 % CPU and did fewer requests per wake-up and per
// write than it does at full load: 39,000–42,000 requests per CPU-second against 44,000–50,000 with
// this origin at 94–98 % CPU, which put Portico at 0.46–0.49× nginx where a hand measurement with a
// saturated nginx gave 0.31–0.41×. An nginx origin costs the load core a fraction of Node's, so
// the server under test is the one at its limit. `/1m` is a 1 MiB file (the large-response rows).
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { freePort } from '../../test/helpers/free-port.ts';
import { portFromStdout, spawnPinned, waitForPort, type Spawned } from './proc.ts';

export interface Origin {
  process: Spawned;
  port: number;
  kind: 'nginx' | 'node';
}

export const BODY = `${'x'.repeat(99)}\n`;
export const LARGE_PATH = '/1m';
export const LARGE_BYTES = 1 << 20;

export async function startOrigin(dir: string, cpus: string | null, useNginx: boolean): Promise<Origin> {
  if (!useNginx) {
    const p = spawnPinned('origin', cpus, process.execPath, [path.join(import.meta.dirname, '..', 'origin.ts')], { stdio: ['ignore', 'pipe', 'inherit'] });
    return { process: p, port: await portFromStdout(p), kind: 'node' };
  }
  mkdirSync(path.join(dir, 'temp'), { recursive: true });
  mkdirSync(path.join(dir, 'www'), { recursive: true });
  writeFileSync(path.join(dir, 'www', LARGE_PATH.slice(1)), Buffer.alloc(LARGE_BYTES, 'y'));
  const port = await freePort();
  const temp = (name: string) => `${name}_temp_path ${path.join(dir, 'temp', name)};`;
  const conf = `
${process.getuid?.() === 0 ? 'user root;' : ''}
worker_processes 1;
daemon off;
pid ${path.join(dir, 'nginx.pid')};
error_log ${path.join(dir, 'error.log')} warn;
events { worker_connections 8192; }
http {
  ${temp('client_body')} ${temp('proxy')} ${temp('fastcgi')} ${temp('uwsgi')} ${temp('scgi')}
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 60s;
  server {
    listen 127.0.0.1:${port} backlog=4096;
    root ${path.join(dir, 'www')};
    location = / { default_type text/plain; return 200 "${BODY.slice(0, -1)}\\n"; }
    location = ${LARGE_PATH} { default_type application/octet-stream; }
  }
}
`;
  const confFile = path.join(dir, 'nginx.conf');
  writeFileSync(confFile, conf);
  const p = spawnPinned('origin-nginx', cpus, 'nginx', ['-p', dir, '-e', path.join(dir, 'error.log'), '-c', confFile], { stdio: 'ignore' });
  await Promise.race([
    waitForPort(port),
    p.exited.then((code) => { throw new Error(`the nginx origin exited with ${code} (see ${path.join(dir, 'error.log')})`); }),
  ]);
  return { process: p, port, kind: 'nginx' };
}
