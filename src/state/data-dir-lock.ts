// The embedded state's data dir belongs to one process: a lock file holding its pid and a token
// (src/state/embedded.ts takes it when the stores open and gives it back when they close).
import { linkSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';

// Locks this process holds, by token. A lock file naming our own pid but a token we do not hold was
// left by an earlier process that had the same pid (a container's pid 1 after kill -9): stale.
const heldLocks = new Set<string>();

/**
 * One process owns the data dir. A lock left by a dead process (kill -9) is taken over.
 *
 * Taking over must not let two processes that start together both win. Removing the stale file and
 * creating a new one would: B could remove the lock A had just made in its place. So the stale file
 * is first moved aside under a name of this process's own (a rename is atomic: of several processes,
 * one moves it), and only a process that moved exactly the stale holder's file goes on to create
 * the lock (`wx`: exactly one creator). One that finds it moved a newer holder's file puts it back
 * and is refused. In the instant that file is away a third process can create one of its own, and
 * the put-back then fails: so a process that found a lock file in its way does not count the lock
 * as its own until it has waited SETTLE_MS and read its own token there again (else it is refused,
 * and one that finds no file at all starts over).
 */
export function lockDataDir(dataDir: string): () => void {
  const file = path.join(dataDir, 'portico.lock');
  const token = `${process.pid} ${randomBytes(8).toString('hex')}`;
  const locked = (pid: number) => Object.assign(new Error(`${dataDir} is in use by process ${pid}; one process owns the embedded state (set PORTICO_REDIS_URL to run many)`), { code: 'DATA_DIR_LOCKED' });
  for (let attempt = 0; ; attempt++) {
    let created = false;
    try {
      writeFileSync(file, token, { flag: 'wx' }); // atomic: exactly one opener creates it
      created = true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    if (created) {
      if (attempt === 0) break; // no lock file was in the way: nobody else is taking one over
      sleepSync(SETTLE_MS);
      const now = readIfThere(file);
      if (now === token) break;
      if (now !== null) throw locked(Number(now.split(' ')[0]));
      continue; // moved away and not put back: start over
    }
    const holder = readIfThere(file);
    if (holder === null) continue; // released meanwhile
    const pid = Number(holder.split(' ')[0]);
    if (attempt > 3) throw locked(pid); // others keep taking it: let them
    if (heldLocks.has(holder) || (Number.isInteger(pid) && pid > 0 && pid !== process.pid && isAlive(pid))) throw locked(pid);
    const aside = `${file}.${token.replace(' ', '.')}`;
    try {
      renameSync(file, aside);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // another process moved it first
      throw err;
    }
    const moved = readFileSync(aside, 'utf8');
    if (moved !== holder) {
      // a process that took over first had already made its lock here: that one stays the owner
      // (should a third have created one in the instant it was away, the link fails, and the first
      // finds the third's token when it reads its lock again: the third is the owner)
      let owner = moved;
      try {
        linkSync(aside, file);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        owner = readIfThere(file) ?? moved;
      } finally {
        rmSync(aside, { force: true });
      }
      throw locked(Number(owner.split(' ')[0]));
    }
    rmSync(aside, { force: true });
  }
  heldLocks.add(token);
  return () => {
    heldLocks.delete(token);
    try {
      if (readFileSync(file, 'utf8') === token) rmSync(file, { force: true });
    } catch {
      // already gone: nothing to release
    }
  };
}

/** how long a process that took the lock amid others waits before it trusts its lock file (see lockDataDir) */
const SETTLE_MS = 200;

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function readIfThere(file: string): string | null {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
