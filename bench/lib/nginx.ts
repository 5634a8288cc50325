// nginx as the reference: one worker, TLS with Portico's own fallback certificate, a keep-alive
// upstream pool to the same origin, and a plain-HTTP listener that redirects like Portico's HTTP
// listener does. Its access log is on and buffered (`buffer=64k flush=1s`), as Portico's is (16 KB
// or 250 ms): an unbuffered log costs nginx a write(2) per request, 6–9 % of its CPU here.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { freePort } from '../../test/helpers/free-port.ts';
import { spawnPinned, waitForPort, type Spawned } from './proc.ts';
// Portico's TLS 1.3 suite order (AES-128-GCM first): the clients here list AES-256 first, and
// following them would cost nginx ~27 µs more per full handshake than Portico
import { TLS13_SUITES } from '../../src/edge/listeners.ts';

export interface Nginx {
  process: Spawned;
  https: number;
  http: number;
  accessLog: string;
}

export async function startNginx(dir: string, opts: { certFile: string; keyFile: string; originPort: number; cpus: string | null }): Promise<Nginx> {
  mkdirSync(path.join(dir, 'temp'), { recursive: true });
  const https = await freePort();
  const http = await freePort();
  const accessLog = path.join(dir, 'access.log');
  const temp = (name: string) => `${name}_temp_path ${path.join(dir, 'temp', name)};`;
  const conf = `
${process.getuid?.() === 0 ? 'user root;' : ''}
worker_processes 1;
daemon off;
master_process on;
pid ${path.join(dir, 'nginx.pid')};
error_log ${path.join(dir, 'error.log')} warn;
events { worker_connections 4096; }
http {
  ${temp('client_body')} ${temp('proxy')} ${temp('fastcgi')} ${temp('uwsgi')} ${temp('scgi')}
  log_format bench '$remote_addr [$time_local] "$request" $status $body_bytes_sent $request_time reused=$ssl_session_reused';
  access_log ${accessLog} bench buffer=64k flush=1s;
  keepalive_requests 10000000;
  keepalive_timeout 60s;
  upstream origin {
    server 127.0.0.1:${opts.originPort};
    keepalive 64;
  }
  server {
    listen 127.0.0.1:${https} ssl http2;
    server_name bench.localhost;
    ssl_certificate ${opts.certFile};
    ssl_certificate_key ${opts.keyFile};
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_ecdh_curve X25519:prime256v1:secp384r1;
    ssl_prefer_server_ciphers on;
    ssl_conf_command Ciphersuites ${TLS13_SUITES};
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For $remote_addr;
      proxy_set_header X-Forwarded-Proto https;
      proxy_set_header X-Forwarded-Host $host;
    }
  }
  server {
    listen 127.0.0.1:${http};
    location / { return 308 https://$host$request_uri; }
  }
}
`;
  const confFile = path.join(dir, 'nginx.conf');
  writeFileSync(confFile, conf);
  const process_ = spawnPinned('nginx', opts.cpus, 'nginx', ['-p', dir, '-e', path.join(dir, 'error.log'), '-c', confFile], { stdio: 'ignore' });
  await Promise.race([
    Promise.all([waitForPort(https), waitForPort(http)]),
    process_.exited.then((code) => { throw new Error(`nginx exited with ${code} (see ${path.join(dir, 'error.log')})`); }),
  ]);
  return { process: process_, https, http, accessLog };
}
