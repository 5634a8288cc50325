import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { selfSigned } from '../../src/certs/fallback.ts';
import { freePort } from './free-port.ts';
import { connectRedis, openRedisCommands } from '../../src/state/redis.ts';
import type { RedisCommands } from '../../src/state/redis-commands.ts';

export interface RedisServer {
  url: string;
  port: number;
  process: ChildProcess;
  /**
   * TLS only: the certificate the server started with (self-signed for localhost and 127.0.0.1, made by startRedis),
   * the file to trust it with (NODE_EXTRA_CA_CERTS, `redis-cli --tls --cacert`)
   */
  caFile?: string;
  /**
   * TLS only: kill the server and start it again on the same port with a new self-signed
   * certificate, one that `caFile` does not hold (clients that trusted the first one must refuse it)
   */
  restartWithNewCertificate(): Promise<void>;
  /** SIGKILL the server (it comes back with restart()) */
  kill(): Promise<void>;
  restart(): Promise<void>;
  stop(): Promise<void>;
}

async function waitForPort(port: number, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.once('connect', () => { socket.destroy(); resolve(true); });
      socket.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`redis-server did not listen on ${port}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/**
 * Starts a private redis-server on a free loopback port, without persistence. `tls`: TLS only (no
 * plaintext port), with a new self-signed certificate (`caFile`), at `rediss://localhost:<port>`.
 */
export async function startRedis({ tls = false }: { tls?: boolean } = {}): Promise<RedisServer> {
  const dir = mkdtempSync(path.join(tmpdir(), 'portico-redis-'));
  const port = await freePort();
  let listen = ['--port', String(port)];
  let certificates = 0;
  // a new certificate and key in `dir`, presented from the next launch on; returns the certificate's file
  const newCertificate = async () => {
    const pair = await selfSigned(['localhost', '127.0.0.1'], 1);
    const certFile = path.join(dir, `cert-${++certificates}.pem`);
    const keyFile = path.join(dir, `key-${certificates}.pem`);
    writeFileSync(certFile, pair.cert);
    writeFileSync(keyFile, pair.key, { mode: 0o600 });
    listen = ['--port', '0', '--tls-port', String(port), '--tls-cert-file', certFile, '--tls-key-file', keyFile, '--tls-auth-clients', 'no'];
    return certFile;
  };
  const caFile = tls ? await newCertificate() : undefined;
  let child: ChildProcess;
  const launch = async () => {
    child = spawn('redis-server', [...listen, '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
    await waitForPort(port);
  };
  const exited = () => new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  const kill = async () => { child.kill('SIGKILL'); await exited(); };
  await launch();
  return {
    url: tls ? `rediss://localhost:${port}` : `redis://127.0.0.1:${port}`,
    port,
    caFile,
    get process() { return child; },
    async restartWithNewCertificate() {
      if (!tls) throw new Error('restartWithNewCertificate() needs startRedis({ tls: true })');
      await kill();
      await newCertificate();
      await launch();
    },
    kill,
    async restart() { await launch(); },
    async stop() { await kill(); rmSync(dir, { recursive: true, force: true }); },
  };
}

/** Portico's own connections to `url` and its command path (state/redis-commands.ts), as main.ts hands them to the certificates' stores; closed at `owner`'s end */
export function commandsOn(url: string, owner: { teardown(fn: () => void): void }): RedisCommands {
  const connections = connectRedis(url, 1000);
  owner.teardown(() => {
    connections.client.disconnect();
    connections.subscriber.disconnect();
  });
  return openRedisCommands(connections);
}
