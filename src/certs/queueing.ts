// The order queue as ordering.ts works it (DESIGN §6): whether an order must wait behind the domains
// in line, putting a domain in line, working through the line on one instance at a time, and telling
// each domain waiting its place and when its turn should come. The line itself is order-queue.ts.
import { domainEvent } from '../domains/events.ts';
import type { Metrics } from '../metrics.ts';
import type { Domain, Stores } from '../state/types.ts';
import { setCertificateState } from './certificate-state.ts';
import type { Holding } from './lock.ts';
import type { OrderQueue } from './order-queue.ts';

// the queue is worked through in pages; its positions are refreshed for the first this many
const QUEUE_PAGE = 1_000;

// what createQueueing() needs of ordering.ts's options
export interface QueueingOptions {
  stores: Stores;
  queue: OrderQueue;
  metrics: Metrics;
  now: () => number;
  queueEstimates(): Promise<((place: number) => number) | null>;
}

/** `obtain`: ordering.ts's, for each domain in line in turn; an account-wide limit ends the drain there */
export function createQueueing(options: QueueingOptions, holding: Holding, obtain: (hostname: string, reason: 'queue') => Promise<{ queued?: { accountWide: boolean } }>) {
  const { stores, queue, metrics, now } = options;

  /**
   * Would an order now take what the queue waits for? Yes while the account-wide order budget (of the
   * issuer that refills first) cannot cover everyone in line and this one too. Without an
   * account-wide limit at some issuer, nobody in line waits for one.
   */
  async function behindQueue(): Promise<boolean> {
    const waiting = await queue.size();
    if (waiting === 0) return false;
    const estimate = await options.queueEstimates().catch(() => null);
    return estimate !== null && estimate(waiting + 1) > now();
  }

  /** Puts the domain in line (keeping its place if it has one) and says so on its timeline. */
  async function enqueue(domain: Domain, retryAt: number | null, why: string): Promise<void> {
    const since = domain.verifiedAt ? Date.parse(domain.verifiedAt) : now();
    await queue.add(domain.hostname, since);
    const position = await positionOf(domain.hostname);
    const estimate = await options.queueEstimates().catch(() => null);
    const at = new Date(Math.max(retryAt ?? now(), estimate?.(position) ?? now(), now())).toISOString();
    await setCertificateState(stores.domains, domain.hostname, (d) => ({ ...d.certificate, status: d.certificate.status === 'issued' ? 'issued' : 'queued', nextAttemptAt: at, queuePosition: position }),
      domain.certificate.status === 'queued' ? undefined : domainEvent('certificate_queued', `Waiting in line (place ${position}) because ${why}; the order is placed by ${at}.`, { position, nextAttemptAt: at }, now()));
  }

  async function positionOf(hostname: string): Promise<number> {
    const head = await queue.head(QUEUE_PAGE);
    const index = head.findIndex((e) => e.hostname === hostname);
    return index === -1 ? head.length + 1 : index + 1;
  }

  /**
   * Works through the queue in order while the limits allow, on one instance at a time; then tells
   * every domain still waiting its place and when its turn should come.
   */
  async function drainQueue(): Promise<void> {
    // the common case, every minute on every instance: nothing waits, nothing to lock
    if ((await queue.size()) === 0) return;
    await holding('acme-queue', async () => {
      for (const { hostname } of await queue.head(QUEUE_PAGE)) {
        const result = await obtain(hostname, 'queue');
        if (result.queued?.accountWide) break;
      }
      await refreshPositions();
    });
  }

  /** refreshPositions() now, unless a drain holds the queue (it refreshes when it ends) */
  async function refreshUnlessDraining(): Promise<void> {
    await holding('acme-queue', refreshPositions);
  }

  async function refreshPositions(): Promise<void> {
    const head = await queue.head(QUEUE_PAGE);
    metrics.acmeQueueDepth.set(await queue.size());
    const estimate = await options.queueEstimates().catch(() => null);
    let place = 0;
    for (const { hostname } of head) {
      place += 1;
      const domain = await stores.domains.get(hostname);
      // only what enqueue() has marked as waiting: a domain it is still putting in line keeps its own write
      if (!domain || !(domain.certificate.status === 'queued' || (domain.certificate.status === 'issued' && domain.certificate.queuePosition !== undefined))) continue;
      const known = domain.certificate.nextAttemptAt ? Date.parse(domain.certificate.nextAttemptAt) : 0;
      const at = new Date(Math.max(estimate?.(place) ?? known, now())).toISOString();
      if (domain.certificate.queuePosition === place && domain.certificate.nextAttemptAt === at) continue;
      await stores.domains.setCertificate(hostname, { ...domain.certificate, queuePosition: place, nextAttemptAt: at }, undefined, domain.createdAt);
    }
  }

  /** A removed domain leaves the queue; those behind it move up (their places, the depth gauge). */
  async function forget(hostname: string): Promise<void> {
    await queue.remove(hostname);
    await refreshUnlessDraining();
  }

  return { behindQueue, enqueue, drainQueue, refreshUnlessDraining, forget };
}
