// `portico serve` as a real process until it exits or listens (then it is stopped): how a start that
// must fail, or must work, ends. `uid`: started as that user (needs root).
import { spawn } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { baseEnv } from './portico.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');

export interface ServeOutcome {
  /** the exit code, or 'listening' once it logged its ports (then it is stopped) */
  code: number | null | 'listening';
  /** stdout and stderr */
  output: string;
}

export async function serveOnce(env: Record<string, string>, uid?: number): Promise<ServeOutcome> {
  const command = [process.execPath, path.join(ROOT, 'src/cli/main.ts'), 'serve'];
  // tap's hooks in NODE_OPTIONS write into the checkout, which another user may not
  if (uid !== undefined) command.unshift('/usr/bin/env', '-u', 'NODE_OPTIONS');
  const child = spawn(command[0], command.slice(1), { env: { ...process.env, ...baseEnv(env) }, stdio: ['ignore', 'pipe', 'pipe'], ...(uid === undefined ? {} : { uid, gid: uid }) });
  let output = '';
  const listening = new Promise<'listening'>((resolve) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      output += `${line}\n`;
      if (line.includes('"Portico listening')) resolve('listening');
    });
  });
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  const code = await Promise.race([exited, listening]);
  if (code === 'listening') child.kill('SIGTERM');
  await exited;
  clearTimeout(timer);
  return { code, output };
}
