// Placing certificate orders for verified domains: one order per name at a time in this instance and
// across instances (lock), through the issuers in order (issuer-chain.ts), behind the CA limits in
// verification order (order-queue.ts), retried with growing backoff, each step on the domain's
// timeline. The certificate manager decides when; this decides whether and how.
import { domainEvent, type DomainEvent } from '../domains/events.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { Domain, Stores } from '../state/types.ts';
import { describeLimit, type IssuerChain } from './issuer-chain.ts';
import type { OrderQueue } from './order-queue.ts';
import type { CertStores, StoredCertificate } from './types.ts';
import { sameDomain } from '../domains/same-domain.ts';

// about 1 m, 2 m, 5 m, 10 m, 30 m, 1 h, 2 h, 4 h, then 6 h
const BACKOFF_MS = [60e3, 120e3, 300e3, 600e3, 1800e3, 3600e3, 7200e3, 14400e3, 21600e3];
const LOCK_TTL_MS = 120_000;
// the queue is worked through in pages; its positions are refreshed for the first this many
const QUEUE_PAGE = 1_000;
// a first certificate paused by a misconfigured domain is looked at again after this (as renewals are)
export const PAUSE_RECHECK_MS = 3_600_000;

export function backoffFor(failures: number): number {
  return BACKOFF_MS[Math.min(Math.max(failures, 1), BACKOFF_MS.length) - 1];
}

export type OrderReason = 'verified' | 'handshake' | 'renewal' | 'retry' | 'queue' | 'reverify';

export interface OrderResult {
  certificate: StoredCertificate | null;
  /** over a CA limit: in the queue; `accountWide` when every order waits, not only this domain's */
  queued?: { retryAt: number; accountWide: boolean };
  /** the domain's DNS points elsewhere: nothing was sent to the CA (its validation would fail) */
  paused?: true;
}

export interface OrderingOptions {
  stores: Stores;
  certs: CertStores;
  chain: IssuerChain;
  queue: OrderQueue;
  log: Logger;
  metrics: Metrics;
  now: () => number;
  /** how long an instance that did not get the lock waits for the holder's certificate */
  waitMs: number;
  /** a new certificate is stored: plan its renewal (ARI or the last third) */
  onIssued(stored: StoredCertificate): void;
  /** the queue should be looked at again at this time */
  onQueueDue(at: number): void;
  /** a failed (or paused) first order should be tried again at this time (the backoff's end) */
  onRetryDue(hostname: string, at: number): void;
  /** has this certificate's renewal moment come (renewal.ts)? Checked again under the lock */
  isDue(stored: StoredCertificate): boolean;
  /**
   * When the domain at each place in line should get its order, from the shared budget (null: no
   * account-wide limit to tell by)
   */
  queueEstimates(): Promise<((place: number) => number) | null>;
  /** how long a lock outlives an instance that stops keeping it alive (default 2 min; tests lower it) */
  lockTtlMs?: number;
}

export function createOrdering(options: OrderingOptions) {
  const { stores, certs, chain, queue, log, metrics, now } = options;
  const lockTtlMs = options.lockTtlMs ?? LOCK_TTL_MS;
  const inFlight = new Map<string, Promise<OrderResult>>();

  /**
   * Takes a lock across instances and keeps it while `work` runs, however long the CA takes (an
   * order through several CAs can outlast any fixed TTL, and a second instance would then order the
   * same name again): extended every third of its TTL, released after. Null when another holds it.
   */
  async function holding<T>(name: string, work: () => Promise<T>): Promise<{ result: T } | null> {
    const token = await certs.locks.acquire(name, lockTtlMs);
    if (!token) return null;
    const keepAlive = setInterval(() => {
      certs.locks.extend(name, token, lockTtlMs).then(
        (held) => { if (!held) log.warn({ lock: name }, 'a lock expired while its work ran: another instance may do the same work'); },
        (err) => log.warn({ lock: name, err: (err as Error).message }, 'could not extend a lock'),
      );
    }, lockTtlMs / 3);
    keepAlive.unref();
    try {
      return { result: await work() };
    } finally {
      clearInterval(keepAlive);
      await certs.locks.release(name, token).catch(() => undefined);
    }
  }

  // an order's steps go on the timeline of the domain it was placed for, not on one added back under
  // the same name while it ran: the store checks that and appends in one step
  const record = (domain: Domain) => async (event: DomainEvent) => {
    // an issuer's failure is told to the operator too, also when the order then goes on (the next
    // issuer, or once more after registering the account again) and ends well
    if (event.type === 'order_failed') log.warn({ hostname: domain.hostname, ...event.details, detail: event.message }, 'an issuer could not issue');
    await stores.domains.appendEvent(domain.hostname, event, domain.createdAt);
  };

  /**
   * `of`: only while the domain of that name is still this one. Written only onto the domain `update`
   * read (the store compares its createdAt as it writes): one removed and added back between the read
   * and the write does not get the old one's state.
   */
  async function setCertificateState(hostname: string, update: (domain: Domain) => Domain['certificate'], event?: DomainEvent, of?: Domain): Promise<void> {
    const domain = await stores.domains.get(hostname);
    if (!domain || (of && !sameDomain(of, domain))) return;
    await stores.domains.setCertificate(hostname, update(domain), event, domain.createdAt);
  }

  function obtain(hostname: string, reason: OrderReason): Promise<OrderResult> {
    const running = inFlight.get(hostname);
    if (running) return running;
    const work = runForCurrentDomain(hostname, reason).finally(() => inFlight.delete(hostname));
    inFlight.set(hostname, work);
    return work;
  }

  async function runForCurrentDomain(hostname: string, reason: OrderReason): Promise<OrderResult> {
    const result = await run(hostname, reason);
    // the order was for a domain removed meanwhile and the name was added back: the new domain's
    // verification joined this order (this instance) or waited for its lock (another), so it gets its
    // own order here, as a newly verified domain does. Read after the lock is released, so a
    // verification that found the lock held is seen.
    return result.replaced ? runForCurrentDomain(hostname, 'verified') : result;
  }

  async function run(hostname: string, reason: OrderReason): Promise<OrderResult & { replaced?: true }> {
    // 1. only verified domains, read fresh from the store (never the cache), get an order
    const domain = await stores.domains.get(hostname);
    if (!domain || domain.status !== 'verified') {
      if (reason === 'queue') await queue.remove(hostname);
      return { certificate: null };
    }
    const existing = await certs.certificates.get(hostname);
    const valid = existing !== null && Date.parse(existing.notAfter) > now() ? existing : null;
    if (valid && (reason === 'verified' || reason === 'handshake')) return { certificate: valid };
    // Re-verify starts an attempt that keeps a certificate needing no replacement: valid, not yet due
    // for renewal, from an issuer still configured. Pressing it again must not order one certificate
    // per press (CAs count duplicates: Let's Encrypt refuses a sixth for the same names in a week).
    if (valid && reason === 'reverify' && !options.isDue(valid) && fromConfiguredIssuer(valid)) return { certificate: valid };
    // 2. no order while the domain's DNS points elsewhere, with or without a certificate: the CA's
    // validation would fail and count against its failed-validation limit (DESIGN §6)
    if (domain.health === 'misconfigured') return pause(domain, valid, reason);
    if (domain.certificate.renewalPausedAt) await setCertificateState(hostname, ({ certificate: { renewalPausedAt: _gone, ...rest } }) => rest);
    // a failed order waits out its backoff: a first certificate (`failed`) and a renewal (`issued`,
    // its certificate maybe expired since) alike. Only the retry and queue jobs go before it ends
    // (the renewal job waits it out itself, renewal.ts); Re-verify has reset it.
    const next = domain.certificate.nextAttemptAt ? Date.parse(domain.certificate.nextAttemptAt) : 0;
    const backingOff = next > now() && (domain.certificate.status === 'failed' || domain.certificate.status === 'issued');
    if (reason !== 'retry' && reason !== 'queue' && backingOff) return { certificate: valid };
    // 3. behind an account-wide CA limit the queue goes first, in verification order: nothing
    // overtakes it. A domain in line stays there; another joins the back only when it would take an
    // order the queue is waiting for (what holds a queue back may be its domains' own limits, per
    // registered domain or hostname: those hold nobody else back, and this order goes now)
    const inLine = domain.certificate.status === 'queued' || domain.certificate.queuePosition !== undefined;
    if (reason !== 'queue' && (inLine || (await behindQueue()))) {
      if (!inLine) {
        await enqueue(domain, null, 'other domains are waiting for the CA limits before it');
        // the queue's job looks at once: the budget may have refilled since it last did
        options.onQueueDue(now());
      } else if (reason !== 'handshake') {
        // shown as waiting: make sure it is in line (a handshake, possibly one of many, writes nothing)
        await queue.add(hostname, domain.verifiedAt ? Date.parse(domain.verifiedAt) : now());
      }
      return { certificate: valid, queued: { retryAt: now(), accountWide: true } };
    }
    // 4. one instance orders; the others find the result in the store
    const ordered = await holding(`cert:${hostname}`, async () => {
      if (reason === 'renewal' && valid) {
        // another instance (or the other path: job or sweep) may have renewed it just now
        const fresh = await certs.certificates.get(hostname);
        if (fresh && !options.isDue(fresh)) return { certificate: fresh };
      }
      return order(domain, valid, reason);
    });
    return ordered ? ordered.result : { certificate: await waitForOther(hostname) };
  }

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

  /** issued by one of the configured issuers (a certificate stored before directories were kept counts as one) */
  function fromConfiguredIssuer(stored: StoredCertificate): boolean {
    return stored.directory === undefined || chain.directories.includes(stored.directory);
  }

  /**
   * A misconfigured domain waits out of line: a renewal's own job looks again (renewal.ts); a first
   * certificate's cert-retry job does, once an hour, and orders when the domain is healthy again.
   */
  async function pause(domain: Domain, valid: StoredCertificate | null, reason: OrderReason): Promise<OrderResult> {
    const { hostname } = domain;
    // out of the queue: it would hold a place (and the depth) it cannot use
    const waiting = domain.certificate.status === 'queued' || domain.certificate.queuePosition !== undefined;
    if (reason === 'queue' || waiting) await queue.remove(hostname);
    if (waiting) {
      await setCertificateState(hostname, (d) => ({ ...d.certificate, status: d.certificate.status === 'queued' ? 'none' : d.certificate.status, queuePosition: undefined, nextAttemptAt: undefined }));
    }
    // the renewal came due: said once on the timeline (its job looks again every hour, writing nothing),
    // with the date the certificate runs out, which the owner now races against
    if (reason === 'renewal' && valid && !domain.certificate.renewalPausedAt) {
      await setCertificateState(hostname, (d) => ({ ...d.certificate, renewalPausedAt: new Date(now()).toISOString() }), domainEvent(
        'misconfigured',
        `The certificate's renewal is due but is not ordered while DNS does not point at the platform (the certificate authority's check would fail). The current certificate is served until it expires on ${valid.notAfter}; once DNS is fixed, the next check resumes renewals.`,
        { renewal: 'paused', notAfter: valid.notAfter },
        now(),
      ));
    }
    // a handshake (possibly one of many) writes nothing more
    // (the cert-retry job itself answers its next time)
    if (!valid && reason !== 'retry' && (waiting || reason !== 'handshake')) options.onRetryDue(hostname, now() + PAUSE_RECHECK_MS);
    return { certificate: valid, paused: true };
  }

  /**
   * After the CA answered: is the domain the order was placed for still there and verified? It may
   * have been removed meanwhile, and its name added back: a new domain (another createdAt), which
   * gets an order of its own.
   */
  async function stillWanted(domain: Domain): Promise<'wanted' | 'gone' | 'replaced'> {
    const current = await stores.domains.get(domain.hostname);
    if (!sameDomain(domain, current)) return current ? 'replaced' : 'gone';
    return current!.status === 'verified' ? 'wanted' : 'gone';
  }

  /**
   * The domain went while its order ran: nothing of the order stays (certificate, queue entry). A
   * domain added back under the name keeps its own place in the queue, and the instances that cached
   * the dropped certificate meanwhile (waiting for this order) forget it.
   */
  async function drop(hostname: string, issued: boolean, state: 'gone' | 'replaced', stored = false): Promise<OrderResult & { replaced?: true }> {
    await certs.certificates.remove(hostname).catch(() => undefined);
    if (state === 'gone') await queue.remove(hostname);
    if (stored) await stores.events.publish(`domain:${hostname}`).catch(() => undefined);
    log.info({ hostname, ...(state === 'replaced' ? { addedBack: true } : {}) }, issued ? 'certificate dropped: the domain was removed (or is no longer verified) while its order ran' : 'order ended after the domain was removed (or is no longer verified)');
    return state === 'replaced' ? { certificate: null, replaced: true } : { certificate: null };
  }

  async function order(domain: Domain, valid: StoredCertificate | null, reason: OrderReason): Promise<OrderResult & { replaced?: true }> {
    const { hostname } = domain;
    const started = now();
    if (!valid) await setCertificateState(hostname, (d) => ({ ...d.certificate, status: 'pending', queuePosition: undefined }), undefined, domain);
    const replaces = valid?.ari && valid.directory ? { certId: valid.ari.certId, directory: valid.directory } : undefined;
    const outcome = await chain.issue({ hostname, ...(replaces ? { replaces } : {}), record: record(domain) });
    // the CA can take seconds: the owner may have removed the domain meanwhile (and added it back)
    const answered = await stillWanted(domain);
    if (answered !== 'wanted') return drop(hostname, outcome.kind === 'issued', answered);
    if (outcome.kind === 'issued') {
      const { issued, issuer } = outcome;
      const stored: StoredCertificate = { hostname, ...issued, directory: issuer.directory };
      await certs.certificates.put(stored);
      // removed between the look above and the write: its removal found nothing to delete yet
      const written = await stillWanted(domain);
      if (written !== 'wanted') return drop(hostname, true, written, true);
      await stores.domains.setCertificate(hostname, { status: 'issued', issuer: issued.issuer, notAfter: issued.notAfter }, domainEvent(
        'certificate_issued',
        `${valid ? 'Renewed' : 'Got'} the certificate from ${issuer.name} (issued by ${issued.issuer}), valid until ${issued.notAfter}.`,
        { issuer: issued.issuer, directory: issuer.directory, notAfter: issued.notAfter, ...(reason === 'renewal' ? { renewal: true } : {}) },
        now(),
      ), domain.createdAt);
      await queue.remove(hostname);
      metrics.acmeOrders.inc({ result: 'success' });
      metrics.acmeOrderDuration.observe((now() - started) / 1000);
      log.info({ hostname, issuer: issuer.name, notAfter: issued.notAfter, reason }, 'certificate issued');
      await stores.events.publish(`domain:${hostname}`);
      options.onIssued(stored);
      return { certificate: stored };
    }
    if (outcome.kind === 'limited') {
      const accountWide = outcome.limit === 'new_orders';
      await enqueue(domain, outcome.retryAt, `${outcome.issuer.name}'s limit of ${describeLimit(outcome.limit)} is reached`);
      options.onQueueDue(outcome.retryAt);
      // several may have joined at once (other orders, other instances): tell each its place again
      await refreshUnlessDraining();
      return { certificate: valid, queued: { retryAt: outcome.retryAt, accountWide } };
    }
    const err = outcome.error;
    metrics.acmeOrders.inc({ result: 'failure' });
    await queue.remove(hostname);
    const failures = (domain.certificate.failures ?? 0) + 1;
    const delay = Math.max(backoffFor(failures), (err.retryAfterSeconds ?? 0) * 1000);
    await setCertificateState(hostname, (d) => ({
      ...d.certificate,
      status: valid ? 'issued' : 'failed',
      lastError: `${err.kind}: ${err.message}`,
      nextAttemptAt: new Date(now() + delay).toISOString(),
      queuePosition: undefined,
      failures,
    }), undefined, domain).catch(() => undefined);
    // a first certificate is tried again when the backoff ends; a renewal's own job does that
    if (!valid) options.onRetryDue(hostname, now() + delay);
    log.warn({ hostname, kind: err.kind, err: err.message }, 'certificate order failed');
    return { certificate: valid };
  }

  /** Puts the domain in line (keeping its place if it has one) and says so on its timeline. */
  async function enqueue(domain: Domain, retryAt: number | null, why: string): Promise<void> {
    const since = domain.verifiedAt ? Date.parse(domain.verifiedAt) : now();
    await queue.add(domain.hostname, since);
    const position = await positionOf(domain.hostname);
    const estimate = await options.queueEstimates().catch(() => null);
    const at = new Date(Math.max(retryAt ?? now(), estimate?.(position) ?? now(), now())).toISOString();
    await setCertificateState(domain.hostname, (d) => ({ ...d.certificate, status: d.certificate.status === 'issued' ? 'issued' : 'queued', nextAttemptAt: at, queuePosition: position }),
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

  /** Another instance holds the order: wait for its certificate, or for it to give up. */
  async function waitForOther(hostname: string): Promise<StoredCertificate | null> {
    const deadline = now() + options.waitMs;
    while (now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
      const stored = await certs.certificates.get(hostname).catch(() => null);
      if (stored && Date.parse(stored.notAfter) > now()) return stored;
      const domain = await stores.domains.get(hostname).catch(() => null);
      if (!domain || domain.certificate.status === 'failed' || domain.certificate.status === 'queued') return null;
    }
    return null;
  }

  return {
    obtain,
    drainQueue,
    /** A removed domain leaves the queue; those behind it move up (their places, the depth gauge). */
    async forget(hostname: string): Promise<void> {
      await queue.remove(hostname);
      await refreshUnlessDraining();
    },
    /**
     * The owner fixed something: forget the backoff and try at once. A domain in line keeps its
     * place and its turn (queued shows queuePosition and nextAttemptAt): a CA limit is not a backoff.
     */
    async reset(hostname: string): Promise<void> {
      await setCertificateState(hostname, (d) => {
        const inLine = d.certificate.status === 'queued' || d.certificate.queuePosition !== undefined;
        return { ...d.certificate, failures: 0, ...(inLine ? {} : { nextAttemptAt: undefined }) };
      });
    },
  };
}

export type Ordering = ReturnType<typeof createOrdering>;
