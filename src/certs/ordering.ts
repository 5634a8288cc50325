// Placing certificate orders for verified domains: one order per name at a time in this instance and
// across instances (lock.ts), through the issuers in order (issuer-chain.ts), behind the CA limits in
// verification order (queueing.ts), none while DNS points elsewhere (pause.ts), retried with growing
// backoff (backoff.ts), each step on the domain's timeline. The certificate manager decides when;
// this decides whether and how.
import { domainEvent, type DomainEvent } from '../domains/events.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { Domain, Stores } from '../state/types.ts';
import { backoffFor, backOff, resetBackoff } from './backoff.ts';
import { setCertificateState } from './certificate-state.ts';
import { describeLimit, type ChainOutcome, type IssuerChain } from './issuer-chain.ts';
import { createHolding } from './lock.ts';
import type { OrderQueue } from './order-queue.ts';
import { pause, PAUSE_RECHECK_MS } from './pause.ts';
import { createQueueing } from './queueing.ts';
import type { CertStores, OrderReason, OrderResult, StoredCertificate } from './types.ts';
import { sameDomain } from '../domains/same-domain.ts';

// ordering's constants and result types, for its callers (manager.ts, jobs.ts) to import from one place
export { backoffFor, PAUSE_RECHECK_MS };
export type { OrderReason, OrderResult };

// how long an issued certificate is kept in hand while the state cannot be written, and how often it is tried
const KEEP_ISSUED_MS = 60_000;
const KEEP_ISSUED_PAUSE_MS = 1_000;

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
  const inFlight = new Map<string, Promise<OrderResult>>();
  const holding = createHolding(certs.locks, log, options.lockTtlMs);
  const { behindQueue, enqueue, drainQueue, refreshUnlessDraining, forget } = createQueueing(options, holding, obtain);

  // an order's steps go on the timeline of the domain it was placed for, not on one added back under
  // the same name while it ran: the store checks that and appends in one step
  const record = (domain: Domain) => async (event: DomainEvent) => {
    // an issuer's failure is told to the operator too, also when the order then goes on (the next
    // issuer, or once more after registering the account again) and ends well
    if (event.type === 'order_failed') log.warn({ hostname: domain.hostname, ...event.details, detail: event.message }, 'an issuer could not issue');
    await stores.domains.appendEvent(domain.hostname, event, domain.createdAt);
  };

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
    if (domain.health === 'misconfigured') return pause(options, domain, valid, reason);
    if (domain.certificate.renewalPausedAt) await setCertificateState(stores.domains, hostname, ({ certificate: { renewalPausedAt: _gone, ...rest } }) => rest);
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

  /** issued by one of the configured issuers (a certificate stored before directories were kept counts as one) */
  function fromConfiguredIssuer(stored: StoredCertificate): boolean {
    return stored.directory === undefined || chain.directories.includes(stored.directory);
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
    if (!valid) await setCertificateState(stores.domains, hostname, (d) => ({ ...d.certificate, status: 'pending', queuePosition: undefined }), undefined, domain);
    const replaces = valid?.ari && valid.directory ? { certId: valid.ari.certId, directory: valid.directory } : undefined;
    const outcome = await chain.issue({ hostname, ...(replaces ? { replaces } : {}), record: record(domain) });
    if (outcome.kind === 'issued') return keep(domain, valid, reason, outcome, started);
    // the CA can take seconds: the owner may have removed the domain meanwhile (and added it back)
    const answered = await stillWanted(domain);
    if (answered !== 'wanted') return drop(hostname, false, answered);
    if (outcome.kind === 'limited') {
      const accountWide = outcome.limit === 'new_orders';
      await enqueue(domain, outcome.retryAt, `${outcome.issuer.name}'s limit of ${describeLimit(outcome.limit)} is reached`);
      options.onQueueDue(outcome.retryAt);
      // several may have joined at once (other orders, other instances): tell each its place again
      await refreshUnlessDraining();
      return { certificate: valid, queued: { retryAt: outcome.retryAt, accountWide } };
    }
    await backOff(options, domain, valid, outcome.error);
    return { certificate: valid };
  }

  /**
   * The CA issued: store the certificate and say so on the domain, unless the domain went meanwhile.
   * Each write that fails because the state is unavailable is tried again (keepTrying): the steps up
   * to the domain's status as one (they check the domain again), then the queue on its own, so that a
   * retry does not put the event on the timeline twice.
   */
  async function keep(domain: Domain, valid: StoredCertificate | null, reason: OrderReason, { issued, issuer }: Extract<ChainOutcome, { kind: 'issued' }>, started: number): Promise<OrderResult & { replaced?: true }> {
    const { hostname } = domain;
    const stored: StoredCertificate = { hostname, ...issued, directory: issuer.directory };
    const dropped = await keepTrying(hostname, async () => {
      // the CA can take seconds: the owner may have removed the domain meanwhile (and added it back)
      const answered = await stillWanted(domain);
      if (answered !== 'wanted') return drop(hostname, true, answered);
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
      return null;
    });
    if (dropped) return dropped;
    // left in line, the name would get its order again when the queue drains
    await keepTrying(hostname, () => queue.remove(hostname));
    metrics.acmeOrders.inc({ result: 'success' });
    metrics.acmeOrderDuration.observe((now() - started) / 1000);
    log.info({ hostname, issuer: issuer.name, notAfter: issued.notAfter, reason }, 'certificate issued');
    // without the notice, another instance reads the store on its next miss (a first certificate at
    // once; one that holds the certificate renewed here serves that one until it expires)
    await stores.events.publish(`domain:${hostname}`).catch((err) => log.warn({ hostname, err: (err as Error).message }, 'could not announce the new certificate to the other instances'));
    options.onIssued(stored);
    return { certificate: stored };
  }

  /**
   * An issued certificate is kept in hand while the state cannot be written (a Redis failover, a
   * reshard longer than a write's hold, a full disk) and its storing tried again, every second for
   * up to a minute: thrown away, it would be ordered again, and CAs count duplicates (Let's Encrypt
   * refuses a sixth for the same names in a week). Real time, whatever clock the manager is given.
   */
  async function keepTrying<T>(hostname: string, step: () => Promise<T>): Promise<T> {
    const since = performance.now();
    for (let told = false; ; told = true) {
      try {
        return await step();
      } catch (err) {
        if ((err as { code?: string }).code !== 'STATE_UNAVAILABLE' || performance.now() - since >= KEEP_ISSUED_MS) throw err;
        if (!told) log.warn({ hostname, err: (err as Error).message }, 'certificate issued, but the state cannot be written: kept and stored again in a moment');
        await new Promise((resolve) => setTimeout(resolve, KEEP_ISSUED_PAUSE_MS));
      }
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
    forget,
    reset: (hostname: string) => resetBackoff(stores.domains, hostname),
  };
}

export type Ordering = ReturnType<typeof createOrdering>;
