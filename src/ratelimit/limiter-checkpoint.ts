// The embedded limiter's counts and bans across restarts (DESIGN §8: the limiter is one of the
// embedded store's nouns). Deciding stays in memory: an fsync per /v1 call would cost more than the
// call. The counters go to `<data dir>/limiter.json` when they changed, at most every CHECKPOINT_MS,
// and at stop: a stop loses nothing, a kill -9 the counts of the last CHECKPOINT_MS at most (those
// calls are handed out once more in their windows), as a Redis failover forgets what the replica had
// not received yet. Written to a temp file, fsynced and renamed: a crash leaves one whole snapshot.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../log.ts';
import type { MemoryLimiter } from './memory-limiter.ts';
import { writeFileDurable } from '../state/embedded-domains.ts';

export const CHECKPOINT_MS = 1_000;
const FILE = 'limiter.json';

/** Restores what the data dir holds into `limiter`, then saves as it changes; resolves to the stop. */
export async function keepLimiterCounts(limiter: MemoryLimiter, dataDir: string, log: Logger, now: () => number = Date.now): Promise<() => Promise<void>> {
  const file = path.join(dataDir, FILE);
  try {
    const saved = JSON.parse(await readFile(file, 'utf8')) as { subjects?: unknown };
    const restored = limiter.restore(saved.subjects, now());
    if (restored > 0) log.info({ subjects: restored }, 'rate-limit counts and bans restored from the data dir');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') log.warn({ file, err: (err as Error).message }, 'the saved rate-limit counts cannot be read; every window and ban starts afresh');
  }
  let savedAt = limiter.changes;
  let writing: Promise<void> | null = null;
  const save = async (): Promise<void> => {
    const changes = limiter.changes;
    if (changes === savedAt) return;
    await writeFileDurable(file, JSON.stringify({ version: 1, subjects: limiter.snapshot(now()) }));
    savedAt = changes;
  };
  const saveOnce = (): Promise<void> =>
    (writing ??= save()
      .catch((err: Error & { cause?: Error }) => log.warn({ file, err: (err.cause ?? err).message }, 'could not save the rate-limit counts; trying again'))
      .finally(() => void (writing = null)));
  const timer = setInterval(() => void saveOnce(), CHECKPOINT_MS).unref();
  return async () => {
    clearInterval(timer);
    await writing;
    await saveOnce();
  };
}
