// Holding a lock across instances for as long as some work runs (a certificate order for a name,
// working through the order queue), so that one instance does it while the others do not. The locks
// themselves are kept by the certificate stores (LockStore: file-store.ts, redis-store.ts).
import type { Logger } from '../log.ts';
import type { LockStore } from './types.ts';

const LOCK_TTL_MS = 120_000;

export type Holding = <T>(name: string, work: () => Promise<T>) => Promise<{ result: T } | null>;

export function createHolding(locks: LockStore, log: Logger, ttlMs?: number): Holding {
  const lockTtlMs = ttlMs ?? LOCK_TTL_MS;

  /**
   * Takes a lock across instances and keeps it while `work` runs, however long the CA takes (an
   * order through several CAs can outlast any fixed TTL, and a second instance would then order the
   * same name again): extended every third of its TTL, released after. Null when another holds it.
   */
  return async function holding<T>(name: string, work: () => Promise<T>): Promise<{ result: T } | null> {
    const token = await locks.acquire(name, lockTtlMs);
    if (!token) return null;
    const keepAlive = setInterval(() => {
      locks.extend(name, token, lockTtlMs).then(
        (held) => { if (!held) log.warn({ lock: name }, 'a lock expired while its work ran: another instance may do the same work'); },
        (err) => log.warn({ lock: name, err: (err as Error).message }, 'could not extend a lock'),
      );
    }, lockTtlMs / 3);
    keepAlive.unref();
    try {
      return { result: await work() };
    } finally {
      clearInterval(keepAlive);
      await locks.release(name, token).catch(() => undefined);
    }
  };
}
