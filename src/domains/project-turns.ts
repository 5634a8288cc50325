// An owner's changes to the domains of one project take turns. The rules they keep belong to the
// project, not to one domain (at most one primary; a redirect's target does not redirect, and nothing
// redirects into a domain that gets a redirect: DESIGN §5), so two changes to two of its domains at
// once would both pass their checks: A→B and B→A both accepted made a loop. In this process the turns
// are keyed by project; a lock per project in the lock store (Redis SET NX PX when state is shared,
// certs/types.ts) makes instances take turns too. A change reads what it decides on inside its turn;
// one that reads another project's domain (a redirect to it) takes that project's turn as well.
import { setTimeout as sleep } from 'node:timers/promises';
import type { LockStore } from '../certs/types.ts';
import { HttpError } from '../errors.ts';
import { keyedTurns } from '../turns.ts';

/** how long the lock outlives an instance that died holding it; extended while the change runs */
const LOCK_TTL_MS = 5_000;
/** longer than the TTL: a lock left by an instance that died lapses while a change waits for it */
const WAIT_MS = 6_000;
const FIRST_PAUSE_MS = 10;
const LONGEST_PAUSE_MS = 200;

/**
 * Runs `run` in the turn of each project named. A change that touches two projects (a redirect to a
 * domain of another project: its loop check reads that domain) takes both turns, always in the order
 * of the sorted project ids, so two such changes cannot each hold one turn and wait for the other.
 */
export type ProjectTurns = <T>(projectIds: string | readonly string[], run: () => Promise<T>) => Promise<T>;

export function projectTurns(locks: LockStore): ProjectTurns {
  const turns = keyedTurns();
  return (projectIds, run) => {
    // the wait counts from the request, also while earlier changes of this process go first
    const deadline = Date.now() + WAIT_MS;
    const ordered = [...new Set(typeof projectIds === 'string' ? [projectIds] : projectIds)].sort();
    const inTurns = ordered.reduceRight<() => Promise<unknown>>(
      (inner, projectId) => () => turns(projectId, () => holding(locks, `domains-of:${projectId}`, deadline, inner)),
      run,
    );
    return inTurns() as ReturnType<typeof run>;
  };
}

async function holding<T>(locks: LockStore, name: string, deadline: number, run: () => Promise<T>): Promise<T> {
  const token = await acquire(locks, name, deadline);
  // a verify waits for DNS, which can take longer than the TTL. Should the lock be lost all the same
  // (Redis unreachable past the TTL), the change has begun and finishes: its writes are not undone
  const keepAlive = setInterval(() => void locks.extend(name, token, LOCK_TTL_MS).catch(() => undefined), LOCK_TTL_MS / 3);
  keepAlive.unref();
  try {
    return await run();
  } finally {
    clearInterval(keepAlive);
    // not given back (Redis unreachable): it lapses after the TTL
    await locks.release(name, token).catch(() => undefined);
  }
}

/** tried at least once, then with growing, jittered pauses until the deadline (DESIGN §8: 503 + Retry-After) */
async function acquire(locks: LockStore, name: string, deadline: number): Promise<string> {
  for (let pause = FIRST_PAUSE_MS; ; pause = Math.min(pause * 2, LONGEST_PAUSE_MS)) {
    const token = await locks.acquire(name, LOCK_TTL_MS);
    if (token) return token;
    const left = deadline - Date.now();
    if (left <= 0) throw new HttpError('service_unavailable', 'Another change to the domains of this project is still under way; try again shortly.', { 'retry-after': '1' });
    await sleep(Math.min(left, pause / 2 + Math.random() * (pause / 2)));
  }
}
