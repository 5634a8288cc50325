// The tools the bench drives (wrk, nginx, redis-server, h2load): installed with apt-get when missing
// and the bench runs as root on Debian, else each missing one is a one-line note.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { onPath } from './proc.ts';
import type { Tools } from './context.ts';

export function ensureTools(): Tools & { notes: string[] } {
  const needed: Array<[string, string]> = [['wrk', 'wrk'], ['nginx', 'nginx'], ['redis-server', 'redis-server'], ['h2load', 'nghttp2-client']];
  const notes: string[] = [];
  const missing = needed.filter(([bin]) => !onPath(bin)).map(([, pkg]) => pkg);
  if (missing.length) {
    if (process.getuid?.() === 0 && existsSync('/usr/bin/apt-get')) {
      console.log(`installing ${missing.join(' ')} with apt-get`);
      const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
      try {
        execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
        execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...missing], { stdio: 'inherit', env });
      } catch (err) {
        notes.push(`apt-get install ${missing.join(' ')} failed: ${(err as Error).message.split('\n')[0]}`);
      }
    } else {
      notes.push(`not installed and not root on Debian: ${missing.join(' ')} (sudo apt-get install -y ${missing.join(' ')})`);
    }
  }
  return { wrk: onPath('wrk'), nginx: onPath('nginx'), redis: onPath('redis-server'), h2load: onPath('h2load'), notes };
}

export function version(cmd: string, args: string[]): string {
  const out = spawnSync(cmd, args, { encoding: 'utf8' });
  return `${out.stdout ?? ''}${out.stderr ?? ''}`.split('\n').find(Boolean)?.trim() ?? '?';
}
