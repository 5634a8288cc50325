// The one scheduler for background work on domains (DESIGN §6, "Domains look after themselves"):
// DNS re-checks of pending and verified domains (rechecks.ts), and whatever else registers a job kind
// (queued certificate orders, renewals). Due times live in the state backend (src/state/schedule.ts),
// so they survive restarts and, on Redis, each job runs on one instance.
//
// A pass: 1. claim what is due (a bounded batch), 2. run each job's handler, a few at a time,
// 3. store what the handler answers — its next due time, or nothing (the job is finished) —, a
// failed handler is tried again after RETRY_MS, 4. sleep until the earliest due time, at most
// `maxSleepMs` (another instance may have added an earlier job). Nothing here walks every domain:
// an idle pass costs one read of the earliest due time, whatever the number of jobs.
import type { Logger } from '../log.ts';
import type { ScheduledJob, ScheduleStore } from '../state/schedule.ts';

/**
 * Runs one job. Answers the next due time (ms since the epoch) or null when the job is finished.
 * Delivery is at least once (schedule.ts): a handler re-reads its own state and, when the job turns
 * out not to be due (`job.dueAt` is an old one), answers the due time its state holds.
 */
export type JobHandler = (job: ScheduledJob) => Promise<number | null>;

export interface SchedulerOptions {
  store: ScheduleStore;
  log: Logger;
  now?: () => number;
  /** longest sleep between two looks at the store (default 5 s) */
  maxSleepMs?: number;
  /** how long a claimed job stays another instance's before it may be claimed again (default 5 min) */
  leaseMs?: number;
  /** jobs claimed per pass (default 100) and run at once (default 4) */
  batch?: number;
  concurrency?: number;
}

const RETRY_MS = 60_000;

export function createScheduler(options: SchedulerOptions) {
  const { store, log } = options;
  const now = options.now ?? Date.now;
  const maxSleepMs = options.maxSleepMs ?? 5_000;
  const leaseMs = options.leaseMs ?? 300_000;
  const batch = options.batch ?? 100;
  const concurrency = options.concurrency ?? 4;
  const handlers = new Map<string, JobHandler>();
  let timer: NodeJS.Timeout | null = null;
  let wakeAt = Infinity;
  let running: Promise<number> | null = null;
  let stopped = true;

  async function runJob(job: ScheduledJob): Promise<void> {
    const handler = handlers.get(job.kind);
    try {
      if (!handler) {
        // a kind this version does not know (another version registered it): leave it for that one
        log.warn({ kind: job.kind, key: job.key }, 'no handler for a scheduled job; leaving it for another instance');
        await store.set(job.kind, job.key, now() + leaseMs);
        return;
      }
      const next = await handler(job);
      if (next === null) await store.finish(job);
      else await store.set(job.kind, job.key, next);
    } catch (err) {
      log.warn({ kind: job.kind, key: job.key, err: (err as Error).message }, 'a scheduled job failed; trying again later');
      await store.set(job.kind, job.key, now() + RETRY_MS).catch(() => undefined);
    }
  }

  /** Runs every job due now (in batches); resolves with how many ran. */
  async function runDue(): Promise<number> {
    let ran = 0;
    for (;;) {
      const jobs = await store.claim(now(), batch, leaseMs);
      let next = 0;
      await Promise.all(Array.from({ length: Math.min(concurrency, jobs.length) }, async () => {
        while (next < jobs.length) await runJob(jobs[next++]);
      }));
      ran += jobs.length;
      if (jobs.length < batch) return ran;
    }
  }

  function plan(at: number): void {
    if (stopped || at >= wakeAt) return;
    if (timer) clearTimeout(timer);
    wakeAt = at;
    timer = setTimeout(() => void pass(), Math.max(0, at - now()));
    timer.unref();
  }

  async function pass(): Promise<void> {
    timer = null;
    wakeAt = Infinity;
    if (running) return;
    running = runDue();
    try {
      await running;
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'scheduled work could not be read; trying again');
    } finally {
      running = null;
    }
    const earliest = await store.earliest().catch(() => null);
    plan(Math.min(earliest ?? Infinity, now() + maxSleepMs));
  }

  return {
    /** what runs the jobs of `kind`; one handler per kind */
    register(kind: string, handler: JobHandler): void {
      if (handlers.has(kind)) throw new Error(`job kind ${kind} has a handler already`);
      handlers.set(kind, handler);
    },
    /** (re)schedules one job; durable when it resolves */
    async at(kind: string, key: string, dueAt: number): Promise<void> {
      await store.set(kind, key, dueAt);
      plan(dueAt);
    },
    cancel: (kind: string, key: string) => store.cancel(kind, key),
    runDue,
    start(): void {
      stopped = false;
      plan(now());
    },
    async stop(): Promise<void> {
      stopped = true;
      if (timer) clearTimeout(timer);
      timer = null;
      wakeAt = Infinity;
      await running?.catch(() => undefined);
    },
  };
}

export type Scheduler = ReturnType<typeof createScheduler>;
