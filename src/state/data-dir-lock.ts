// The embedded state's data dir belongs to one process (src/state/embedded.ts takes it when the
// stores open and gives it back when they close).
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';

/**
 * One process owns the data dir. The kernel holds the lock: an exclusive SQLite transaction on
 * `portico.owner` (fcntl locks underneath), begun when the stores open and never committed. The
 * kernel drops it when its process ends, kill -9 included, so there is no stale lock to take over
 * and no race among processes starting together: exactly one gets it, in another container on the
 * same volume too (a pid there says nothing here). A second open in the same process is refused as well.
 * `portico.lock` names the owner's pid for the message of the refused and for people; it is only a note.
 *
 * On its way to the exclusive lock every process holds a shared one for a moment (reading the file's
 * header). Without a wait, processes starting together could each see another's shared lock and all
 * give up, leaving nobody the owner: each retries for up to {@link LOCK_WAIT_MS}, so the refused wait
 * that long before they are told.
 */
export function lockDataDir(dataDir: string): () => void {
  const file = path.join(dataDir, 'portico.owner');
  const db = new DatabaseSync(file, { timeout: LOCK_WAIT_MS, open: false });
  try {
    db.open();
    db.exec('PRAGMA journal_mode=MEMORY'); // the transaction writes nothing: no -journal file beside it
    db.exec('BEGIN EXCLUSIVE');
  } catch (err) {
    if (db.isOpen) db.close();
    const code = (err as { errcode?: number }).errcode;
    if (code !== SQLITE_BUSY) {
      // never replaced here: a process could hold the lock on the file being replaced
      const hint = code === SQLITE_NOTADB ? '; it is not the file Portico makes: remove it if no Portico runs on this data dir' : '';
      throw new Error(`cannot take the lock of ${dataDir} (${file}): ${(err as Error).message}${hint}`, { cause: err });
    }
    const owner = ownerNote(dataDir);
    throw Object.assign(new Error(`${dataDir} is in use by ${owner ? `process ${owner}` : 'another process'}; one process owns the embedded state (set PORTICO_REDIS_URL to run many)`), { code: 'DATA_DIR_LOCKED' });
  }
  const note = path.join(dataDir, 'portico.lock');
  const token = `${process.pid} ${randomBytes(8).toString('hex')}`;
  try {
    writeFileSync(note, token); // the lock is held: nobody else writes it (a killed owner's note is replaced)
  } catch (err) {
    db.close();
    throw err;
  }
  return () => {
    try {
      if (readFileSync(note, 'utf8') === token) rmSync(note, { force: true });
    } catch {
      // already gone: nothing to remove
    }
    db.close(); // ends the transaction, and with it the lock
  };
}

/** How long an open waits for another process's hold on the lock to end before it is refused. */
export const LOCK_WAIT_MS = 1000;
const SQLITE_BUSY = 5;
const SQLITE_NOTADB = 26;

/**
 * The pid the owner wrote. It writes its note just after it takes the lock, over a killed owner's:
 * a note that is missing, or names no live process, is read again for up to 200 ms.
 */
function ownerNote(dataDir: string): number | null {
  for (let attempt = 0; ; attempt++) {
    const pid = readPid(path.join(dataDir, 'portico.lock'));
    if ((pid !== null && isAlive(pid)) || attempt === 20) return pid;
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
  }
}

function readPid(file: string): number | null {
  try {
    const pid = Number(readFileSync(file, 'utf8').split(' ')[0]);
    return Number.isInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
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
