// A start's first reads of the shared state (the domain index, the projects) on a Redis that is
// connected but slow for a moment: one read that outlived the command timeout (150 ms by default)
// stopped the whole start with "state backend unavailable", although the start waits up to 5 s for
// Redis to connect. Such a read is tried again within that same wait; what asking again cannot change
// (a right the Redis user lacks: NOPERM) stops the start at once, as before.
import { setTimeout as sleep } from 'node:timers/promises';
import { refusalIn } from './redis-rights.ts';

/** how long a start's first read keeps trying; the start's wait for Redis to connect (redis.ts) */
export const START_READ_WAIT_MS = 5_000;
/** between tries: past the moment after a timeout during which no command is sent (redis-connect.ts) */
const PAUSE_MS = 300;

/**
 * `read()`, again after a pause while it fails with STATE_UNAVAILABLE (and no NOPERM) and `waitMs`
 * has not passed since the first try; `onRetry` hears each failure that is tried again.
 */
export async function readAtStart<T>(read: () => Promise<T>, waitMs: number, onRetry: (err: Error) => void = () => undefined): Promise<T> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      return await read();
    } catch (err) {
      const unavailable = (err as { code?: unknown } | null)?.code === 'STATE_UNAVAILABLE';
      if (!unavailable || refusalIn(err) !== null || Date.now() + PAUSE_MS >= deadline) throw err;
      onRetry(err as Error);
      await sleep(PAUSE_MS);
    }
  }
}
