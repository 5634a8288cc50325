// The certificate manager's jobs and their due times: on the shared scheduler
// (domains/scheduler.ts) once useScheduler() is called (one instance runs each, they survive
// restarts), else timers in this process (the manager's sweep catches up).
import type { Scheduler } from '../domains/scheduler.ts';
import type { Logger } from '../log.ts';
import type { Stores } from '../state/types.ts';
import type { OrderQueue } from './order-queue.ts';
import { PAUSE_RECHECK_MS, type Ordering } from './ordering.ts';
import type { Renewals } from './renewal.ts';

// the scheduler's job kinds: working through the order queue, one certificate's renewal, and the
// next try of a failed first order
export const QUEUE_JOB = 'acme-queue';
export const RENEWAL_JOB = 'cert-renewal';
export const RETRY_JOB = 'cert-retry';

export interface JobsOptions {
  stores: Stores;
  queue: OrderQueue;
  ordering: Ordering;
  renewals: Renewals;
  queueEstimates(): Promise<((place: number) => number) | null>;
  log: Logger;
  now: () => number;
  /** hands a run (or the scheduling of one) to the manager, whose idle() waits for it */
  track(work: Promise<unknown>): void;
}

export function createJobs(options: JobsOptions) {
  const { stores, ordering, renewals, log, now, track } = options;
  let scheduler: Scheduler | null = null;
  let stopped = false;
  const local = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  const jobs: Record<string, (key: string) => Promise<number | null>> = {
    [QUEUE_JOB]: async () => {
      await ordering.drainQueue();
      if ((await options.queue.size()) === 0) return null;
      // the next look when the first in line should have its turn (at least a second on, at most a minute)
      const turn = (await options.queueEstimates().catch(() => null))?.(1) ?? now() + 60_000;
      return Math.min(Math.max(turn, now() + 1_000), now() + 60_000);
    },
    [RENEWAL_JOB]: (hostname) => renewals.run(hostname),
    // a failed first order, once its backoff has ended (a new failure schedules the next try itself),
    // or one paused while the domain was misconfigured: ordered once its DNS is healthy again
    [RETRY_JOB]: async (hostname) => {
      const domain = await stores.domains.get(hostname);
      if (domain?.status !== 'verified' || (domain.certificate.status !== 'failed' && domain.certificate.status !== 'none')) return null;
      const next = domain.certificate.nextAttemptAt ? Date.parse(domain.certificate.nextAttemptAt) : 0;
      if (next > now()) return next;
      const result = await ordering.obtain(hostname, 'retry');
      return result.paused && !result.certificate ? now() + PAUSE_RECHECK_MS : null;
    },
  };

  function wake(kind: string, key: string, at: number): void {
    if (stopped) return;
    if (scheduler) {
      const set = scheduler.at(kind, key, at).catch((err) => log.warn({ kind, key, err: (err as Error).message }, 'could not schedule certificate work'));
      track(set);
      return;
    }
    const id = `${kind} ${key}`;
    const known = local.get(id);
    if (known && known.at <= at) return;
    if (known) clearTimeout(known.timer);
    const timer = setTimeout(() => {
      local.delete(id);
      track(jobs[kind](key).then((next) => { if (next !== null) wake(kind, key, next); }, (err) => log.warn({ kind, key, err: (err as Error).message }, 'certificate work failed')));
    }, Math.min(Math.max(at - now(), 0) + 20, 2 ** 31 - 1));
    timer.unref();
    local.set(id, { at, timer });
  }

  return {
    wake,

    async cancel(kind: string, key: string): Promise<void> {
      const id = `${kind} ${key}`;
      clearTimeout(local.get(id)?.timer);
      local.delete(id);
      await scheduler?.cancel(kind, key).catch(() => undefined);
    },

    useScheduler(shared: Scheduler): void {
      scheduler = shared;
      for (const [kind, run] of Object.entries(jobs)) shared.register(kind, (job) => run(job.key));
      for (const [id, { at, timer: t }] of local) {
        clearTimeout(t);
        const [kind, key] = [id.slice(0, id.indexOf(' ')), id.slice(id.indexOf(' ') + 1)];
        wake(kind, key, at);
      }
      local.clear();
    },

    stop(): void {
      stopped = true;
      for (const { timer: t } of local.values()) clearTimeout(t);
      local.clear();
    },
  };
}
