// The in-memory domain index (DESIGN §8): a sorted snapshot loaded whole at start (domain-snapshot.ts)
// plus the changes made since, one Map entry per changed hostname. Lookups are synchronous and
// do no I/O, so the request pipeline and the SNI callback can route from it; memory is the snapshot's
// bytes (about 35 per domain) plus the changes, which the owner folds into a new snapshot from time to time.
import { DomainSnapshot, encodeSnapshot, type IndexEntry } from './domain-snapshot.ts';
import type { DomainRoute, DomainStatus } from './types.ts';

const RECENT_MAX = 4096;

export class DomainIndex {
  private base: DomainSnapshot;
  /** hostname → its entry now, or null when it was removed since the snapshot */
  private changes = new Map<string, IndexEntry | null>();
  private counts: Record<DomainStatus, number>;
  // the routes asked for lately (served or not): a hit is one Map lookup instead of a binary search.
  // Bounded, oldest first out, so names nobody serves cannot grow it.
  private recent = new Map<string, DomainRoute | null>();

  constructor(base: DomainSnapshot = DomainSnapshot.empty()) {
    this.base = base;
    this.counts = { ...base.counts };
  }

  /** changed hostnames since the snapshot */
  get changed(): number {
    return this.changes.size;
  }

  get snapshotBytes(): number {
    return this.base.byteLength;
  }

  get(hostname: string): IndexEntry | null {
    const changed = this.changes.get(hostname);
    return changed !== undefined ? changed : this.base.get(hostname);
  }

  /** the route of a served (verified) domain, else null; do not modify it (it may be shared) */
  route(hostname: string): DomainRoute | null {
    const known = this.recent.get(hostname);
    if (known !== undefined) return known;
    const entry = this.get(hostname);
    let route: DomainRoute | null = null;
    if (entry && entry.status === 'verified') {
      route = { projectId: entry.projectId };
      if (entry.redirect) route.redirect = entry.redirect;
      if (entry.hsts) route.hsts = entry.hsts;
    }
    if (this.recent.size >= RECENT_MAX) this.recent.delete(this.recent.keys().next().value as string);
    this.recent.set(hostname, route);
    return route;
  }

  set(hostname: string, entry: IndexEntry | null): void {
    this.recent.delete(hostname);
    const before = this.get(hostname);
    if (before) this.counts[before.status]--;
    if (entry) this.counts[entry.status]++;
    this.changes.set(hostname, entry);
  }

  countByStatus(): Record<DomainStatus, number> {
    return { ...this.counts };
  }

  hostnamesOf(projectId: string): string[] {
    const out = this.base.hostnamesOf(projectId).filter((hostname) => !this.changes.has(hostname));
    for (const [hostname, entry] of this.changes) if (entry?.projectId === projectId) out.push(hostname);
    return out;
  }

  *entries(): Generator<[string, IndexEntry]> {
    for (const [hostname, entry] of this.base.entries()) if (!this.changes.has(hostname)) yield [hostname, entry];
    for (const [hostname, entry] of this.changes) if (entry) yield [hostname, entry];
  }

  /** The snapshot and the changes as one new snapshot (it does not replace this one: see rebase). */
  encode(): Buffer {
    return encodeSnapshot(this.entries());
  }

  /** Continues from `base`, which must hold every change made so far. */
  rebase(base: DomainSnapshot): void {
    this.base = base;
    this.changes = new Map();
    this.counts = { ...base.counts };
    this.recent = new Map();
  }
}

/** The entry of a domain (every status; the route fields only matter once it is verified). */
export function indexEntryOf(domain: { projectId: string; status: DomainStatus; redirect?: IndexEntry['redirect']; hsts?: IndexEntry['hsts'] }): IndexEntry {
  const entry: IndexEntry = { projectId: domain.projectId, status: domain.status };
  if (domain.redirect) entry.redirect = domain.redirect;
  if (domain.hsts) entry.hsts = domain.hsts;
  return entry;
}
