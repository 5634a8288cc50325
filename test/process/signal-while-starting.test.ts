// A signal that comes while Portico is starting is taken once the start is complete. Before, the
// handlers were installed only then, and Node's default action ended the process: a SIGTERM from a
// service manager stopping a unit that had just been started exited 143 (killed by a signal) instead
// of stopping cleanly, and a SIGHUP (a reload asked a moment too early) killed it.
// The start is held by a redis-server frozen with SIGSTOP (the start waits up to 5 s for Redis), and
// the signal is sent once the process catches SIGHUP (/proc/<pid>/status, SigCgt; Node itself catches
// SIGINT and SIGTERM from its first moment), so it lands in the start, after Portico's handlers are set.
// The child runs without the NODE_OPTIONS the test runner adds to every child it spawns: its
// process-info hook catches every signal there (signal-exit), and SigCgt would say nothing.
import t, { type Test } from 'tap';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { baseEnv, cleanup } from '../helpers/portico.ts';
import { startRedis } from '../helpers/redis.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const SIGHUP = 1;

interface Entry {
  msg?: string;
  signal?: string;
}

/** whether `pid` has a handler for signal number `signo` (the SigCgt mask of /proc/<pid>/status) */
function catches(pid: number, signo: number): boolean {
  try {
    const mask = /^SigCgt:\s*([0-9a-f]+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return mask !== undefined && (BigInt(`0x${mask}`) & (1n << BigInt(signo - 1))) !== 0n;
  } catch {
    return false;
  }
}

async function until(what: string, check: () => boolean, logs: string[], ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}:\n${logs.slice(-20).join('\n')}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** `portico serve` on a frozen Redis, signalled with `signal` while its start waits for Redis */
async function signalledWhileStarting(t: Test, signal: NodeJS.Signals) {
  const redis = await startRedis();
  const env = baseEnv({ PORTICO_REDIS_URL: redis.url });
  const child = spawn('env', ['-u', 'NODE_OPTIONS', process.execPath, path.join(ROOT, 'src/cli/main.ts'), 'serve', '--workers', '1'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(async () => {
    child.kill('SIGKILL');
    redis.process.kill('SIGCONT');
    await redis.stop();
    cleanup(env.PORTICO_DATA_DIR, env.PORTICO_CERTS_DIR);
  });
  const logs: string[] = [];
  createInterface({ input: child.stdout! }).on('line', (line) => logs.push(line));
  createInterface({ input: child.stderr! }).on('line', (line) => logs.push(line));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, killedBy) => resolve({ code, signal: killedBy })));
  const entries = (): Entry[] => logs.flatMap((line) => {
    try {
      return [JSON.parse(line) as Entry];
    } catch {
      return [];
    }
  });
  const ended = () => child.exitCode !== null || child.signalCode !== null;
  const listening = () => entries().some((e) => e.msg?.startsWith('Portico listening') === true);

  redis.process.kill('SIGSTOP');
  await until('Portico\'s signal handlers', () => catches(child.pid!, SIGHUP) || ended(), logs);
  t.notOk(listening(), 'the signal is sent before the start is complete');
  child.kill(signal);
  await until('the signal to be noted', () => entries().some((e) => e.signal === signal) || ended(), logs);
  t.equal(child.signalCode, null, `not ended by ${signal} while starting`);
  t.notOk(listening(), 'still starting');
  // Redis answers again: the start completes
  redis.process.kill('SIGCONT');
  return { child, exited, entries, listening, logs };
}

t.test('SIGTERM while starting: the start completes, then Portico stops cleanly and exits 0', async (t) => {
  const { exited, entries, listening, logs } = await signalledWhileStarting(t, 'SIGTERM');
  const timer = setTimeout(() => t.fail(`still running 20 s later:\n${logs.slice(-20).join('\n')}`), 20_000);
  const end = await exited;
  clearTimeout(timer);
  t.same(end, { code: 0, signal: null }, 'exit code 0, not killed by the signal');
  const said = entries().map((e) => e.msg);
  t.ok(said.includes('stop asked while starting: stopping once started'), 'says the stop waits for the start');
  t.ok(listening(), 'the start completed');
  t.ok(said.includes('stopped'), 'then stopped');
});

t.test('SIGHUP while starting: the configuration is reloaded once started, and Portico runs on', async (t) => {
  const { child, entries, listening, logs } = await signalledWhileStarting(t, 'SIGHUP');
  await until('the reload', () => entries().some((e) => e.msg === 'configuration reloaded') || child.exitCode !== null || child.signalCode !== null, logs);
  t.ok(listening(), 'started');
  t.ok(entries().some((e) => e.msg === 'reload asked while starting: reloading once started'), 'says the reload waits for the start');
  t.equal(child.exitCode, null, 'still running');
});
