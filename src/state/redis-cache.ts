// The Redis store's in-process cache of hot reads (key lookups, accounts, category lists).
// - An entry answers for up to 60 s; after 50 s it is read again in the background while it keeps
//   answering, so under steady traffic no request waits for that read.
// - Concurrent misses for one id share one read.
// - While Redis is away (the read fails), the last value this instance saw keeps answering.
// - markStale (a change notice for a list or an account, a reconnect): the entry is read again at its
//   next use instead of being dropped, so an outage that starts right after a notice still finds a
//   value to answer with; with `fallback` false (a key after a reconnect: it may have been revoked)
//   it no longer answers when that read fails.
// - Every invalidation (delete, clear, markStale: a change notice, a reconnect) moves `version`: a
//   read that started before it is not shared with requests made after it and is not kept as fresh.
//   After a markStale that allows a fallback, such a read is still kept as the stale copy (read again
//   at the next use, answering only if that fails): under a stream of notices a list keeps a copy
//   for an outage. After a delete, clear or a markStale without fallback (`dropped` moves) it is not
//   kept at all, so a revoked key is never put back by a read that was already in flight.
// redis.ts owns the instances; redis-notices.ts decides when to invalidate (the `portico:invalidate` channel).

const FRESH_MS = 60_000;
const REFRESH_AFTER_MS = 50_000;
const CACHE_MAX = 100_000;

interface Cached<T> {
  value: T;
  at: number;
  /** resolves to `value`: a hit hands it out instead of making a new promise */
  answer: Promise<T>;
  /** may answer when a read fails */
  fallback: boolean;
}

/** runs one Redis read, turning a failure into STATE_UNAVAILABLE (redis-commands.ts's `call`) */
export type Guard = <T>(run: () => Promise<T>) => Promise<T>;

export class Cache<K, T> extends Map<K, Cached<T>> {
  private version = 0;
  private dropped = 0;
  /** the read in flight per id, shared by the requests that miss meanwhile */
  private loading = new Map<K, { version: number; promise: Promise<T> }>();
  private readonly call: Guard;
  private readonly now: () => number;

  constructor(call: Guard, now: () => number) {
    super();
    this.call = call;
    this.now = now;
  }

  override delete(id: K): boolean {
    this.version++;
    this.dropped++;
    this.loading.delete(id);
    return super.delete(id);
  }

  /** `value` is the newest there is (this instance just wrote it) */
  put(id: K, value: T): void {
    this.version++;
    this.loading.delete(id);
    this.set(id, { value, at: this.now(), answer: Promise.resolve(value), fallback: true });
  }

  /** read `id` again at its next use; until then it answers only when that read fails and `fallback` */
  markStale(id: K, fallback: boolean): void {
    this.version++;
    if (!fallback) this.dropped++;
    this.loading.delete(id);
    const cached = this.get(id);
    if (cached) super.set(id, { ...cached, at: -Infinity, fallback: cached.fallback && fallback });
  }

  /**
   * This instance's own change to the value (a category it made): the copy kept for an outage holds
   * it, and is read again at the next use as after markStale (other instances' changes may be missing).
   */
  amendStale(id: K, change: (value: T) => T): void {
    this.version++;
    this.loading.delete(id);
    const cached = this.get(id);
    if (!cached) return;
    const value = change(cached.value);
    super.set(id, { value, at: -Infinity, answer: Promise.resolve(value), fallback: cached.fallback });
  }

  markAllStale(fallback: boolean): void {
    this.version++;
    if (!fallback) this.dropped++;
    this.loading.clear();
    for (const [id, cached] of this) super.set(id, { ...cached, at: -Infinity, fallback: cached.fallback && fallback });
  }

  override clear(): void {
    this.version++;
    this.dropped++;
    this.loading.clear();
    super.clear();
  }

  /** the cached value of `id`, read with `load` when missing or old (see the header) */
  read(id: K, load: () => Promise<T>): Promise<T> {
    const cached = this.get(id);
    if (cached) {
      const age = this.now() - cached.at;
      if (age < REFRESH_AFTER_MS) return cached.answer;
      if (age < FRESH_MS) {
        this.loadInto(id, load).catch(() => undefined);
        return cached.answer;
      }
    }
    return this.loadInto(id, load).catch((err: unknown) => {
      // the newest copy this instance has now: one dropped meanwhile (a revoked key) must not answer
      const newest = this.get(id);
      if (newest?.fallback) return newest.value;
      throw err;
    });
  }

  private loadInto(id: K, load: () => Promise<T>): Promise<T> {
    const version = this.version;
    const dropped = this.dropped;
    const inFlight = this.loading.get(id);
    if (inFlight && inFlight.version === version) return inFlight.promise;
    const promise = this.call(load).then(
      (value) => {
        if (this.loading.get(id)?.promise === promise) this.loading.delete(id);
        const fresh = this.version === version;
        const current = this.get(id);
        if (fresh || (this.dropped === dropped && (current === undefined || current.at === -Infinity))) {
          if (!current && this.size >= CACHE_MAX) this.evictOldest();
          this.set(id, { value, at: fresh ? this.now() : -Infinity, answer: Promise.resolve(value), fallback: true });
        }
        return value;
      },
      (err: unknown) => {
        if (this.loading.get(id)?.promise === promise) this.loading.delete(id);
        throw err;
      },
    );
    this.loading.set(id, { version, promise });
    return promise;
  }

  /** makes room without counting as an invalidation */
  private evictOldest(): void {
    super.delete(this.keys().next().value as K);
  }
}
