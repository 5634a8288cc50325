import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { freePort } from './free-port.ts';

export interface RedisServer {
  url: string;
  port: number;
  process: ChildProcess;
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

/** Starts a private redis-server on a free loopback port, without persistence. */
export async function startRedis(): Promise<RedisServer> {
  const dir = mkdtempSync(path.join(tmpdir(), 'portico-redis-'));
  const port = await freePort();
  let child: ChildProcess;
  const launch = async () => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
    await waitForPort(port);
  };
  const exited = () => new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  await launch();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    get process() { return child; },
    async kill() { child.kill('SIGKILL'); await exited(); },
    async restart() { await launch(); },
    async stop() { child.kill('SIGKILL'); await exited(); rmSync(dir, { recursive: true, force: true }); },
  };
}
