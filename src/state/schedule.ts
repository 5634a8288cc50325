// Stored due times for background work (src/domains/scheduler.ts runs them): a job is a kind (what
// to do: 'domain-check', …) and a key (to what: a hostname, …) with one due time. Two backends:
// embedded-schedule.ts (files in the data dir, bucketed by hour) and redis-schedule.ts (one sorted set).
//
// Contract:
// - `set` resolves once the due time is durable; a job has one due time, a later `set` moves it;
// - `claim(now, …)` hands out jobs due by `now`, each to one caller across every instance: on Redis the
//   claim moves the job `leaseMs` ahead in the same atomic step, so another instance sees it again
//   only if its claimer died; the claimer then `set`s its next due time or `finish`es it;
// - delivery is at least once: after a crash, and in the embedded backend when a job was moved while
//   its old due time was on disk, a job can come up a second time. Handlers therefore re-read their
//   own state (the domain's `nextCheckAt`, a certificate's expiry) and skip work that is not due;
// - cost: a claim or `earliest` reads only what is due or next, never every job.

export interface ScheduledJob {
  kind: string;
  key: string;
  /** ms since the epoch */
  dueAt: number;
}

export interface ScheduleStore {
  set(kind: string, key: string, dueAt: number): Promise<void>;
  /** many at once, as `set` each (one write per hour file / per thousand jobs) */
  setMany(jobs: readonly ScheduledJob[]): Promise<void>;
  /** forgets the job (no-op when unknown) */
  cancel(kind: string, key: string): Promise<void>;
  /** up to `limit` jobs due by `now`, oldest first, each claimed for `leaseMs` */
  claim(now: number, limit: number, leaseMs: number): Promise<ScheduledJob[]>;
  /** a claimed job that has no next due time: removed unless someone `set` it again meanwhile */
  finish(job: ScheduledJob): Promise<void>;
  /** when the next job is due (possibly in the past), null when none is known */
  earliest(): Promise<number | null>;
  /** one-off work done once per backend (seeding due times): whether `name` was marked done, and marking it */
  marked(name: string): Promise<boolean>;
  mark(name: string): Promise<void>;
  close(): Promise<void>;
}
