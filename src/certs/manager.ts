// Certificates for custom domains: picked per SNI, obtained on their own once a domain verifies
// (ordering.ts: issuers in order, CA limits, queue, backoff, one order per name across every
// instance — and never an order for a name nobody verified), renewed when the CA's renewal
// information says (RFC 9773) or else in the last third of their lifetime. The SecureContext
// cache is context-cache.ts, the background jobs and their due times jobs.ts, the certificate
// gauges certificate-gauges.ts.
import tls from 'node:tls';
import { createHash } from 'node:crypto';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { RouteTable } from '../routing/route.ts';
import { normaliseHostname } from '../routing/hostname.ts';
import type { Domain, Stores } from '../state/types.ts';
import { renewAt, type CertStores, type StoredCertificate } from './types.ts';
import type { RenewalInfo } from './ari.ts';
import { createRenewals } from './renewal.ts';
import type { Scheduler } from '../domains/scheduler.ts';
import type { IssuerChain } from './issuer-chain.ts';
import type { OrderQueue } from './order-queue.ts';
import { createOrdering, backoffFor } from './ordering.ts';
import { createContextCache } from './context-cache.ts';
import { createCertificateGauges } from './certificate-gauges.ts';
import { createJobs, QUEUE_JOB, RENEWAL_JOB, RETRY_JOB } from './jobs.ts';

export interface ManagerOptions {
  stores: Stores;
  certs: CertStores;
  chain: IssuerChain;
  queue: OrderQueue;
  /** the issuing CA's renewal information for a stored certificate (RFC 9773), null when it offers none */
  renewalInfo?(stored: StoredCertificate): Promise<(RenewalInfo & { certId: string }) | null>;
  /** refreshes the limit gauges (portico_acme_limit_remaining) */
  refreshLimitMetrics?(): Promise<void>;
  /** when the domain at each place in the queue should get its order (issuing.ts) */
  queueEstimates?(): Promise<((place: number) => number) | null>;
  routes: RouteTable;
  platformDomain: string;
  /** the operator's wildcard certificate for *.<platform domain> */
  platform: { cert: string; key: string } | null;
  log: Logger;
  metrics: Metrics;
  now?: () => number;
  /** how long a handshake waits for an on-demand order before the fallback certificate */
  onDemandWaitMs?: number;
  cacheSize?: number;
  /** a fraction in [0, 1) per hostname that moves its renewal earlier (tests pass a constant) */
  jitter?: (hostname: string) => number;
  /** how long an order's lock outlives an instance that stops keeping it alive (ordering.ts; tests lower it) */
  lockTtlMs?: number;
}

function hashJitter(hostname: string): number {
  return createHash('sha256').update(hostname).digest().readUInt32BE(0) / 2 ** 32;
}

export { renewAt, backoffFor };

export function createCertificateManager(options: ManagerOptions) {
  const { stores, certs, routes, log, metrics } = options;
  const now = options.now ?? Date.now;
  const jitter = options.jitter ?? hashJitter;
  const waitMs = options.onDemandWaitMs ?? 10_000;
  const cache = createContextCache(options.cacheSize ?? 1_000);
  let platformContext = options.platform ? tls.createSecureContext(options.platform) : null;
  const platformSuffix = `.${options.platformDomain}`;
  let timer: NodeJS.Timeout | null = null;
  // background work this process started, which idle() waits for
  const running = new Set<Promise<unknown>>();
  const track = (work: Promise<unknown>) => {
    running.add(work);
    void work.finally(() => running.delete(work));
  };
  const gauges = createCertificateGauges({ certs, metrics, log, now, track });
  const queueEstimates = () => options.queueEstimates?.() ?? Promise.resolve(null);

  const ordering = createOrdering({
    stores, certs, chain: options.chain, queue: options.queue, log, metrics, now, waitMs,
    onIssued: (stored) => {
      gauges.summariseSoon();
      track(renewals.plan(stored).catch((err) => log.warn({ hostname: stored.hostname, err: (err as Error).message }, 'could not plan the renewal')));
    },
    onQueueDue: (at) => jobs.wake(QUEUE_JOB, 'all', at),
    onRetryDue: (hostname, at) => jobs.wake(RETRY_JOB, hostname, at),
    isDue: (stored) => renewals.isDue(stored),
    queueEstimates,
    ...(options.lockTtlMs ? { lockTtlMs: options.lockTtlMs } : {}),
  });
  const renewals = createRenewals({
    stores, certs, ordering, now, log, jitter,
    ...(options.renewalInfo ? { renewalInfo: options.renewalInfo } : {}),
    wake: (hostname, at) => jobs.wake(RENEWAL_JOB, hostname, at),
  });
  const jobs = createJobs({ stores, queue: options.queue, ordering, renewals, queueEstimates, log, now, track });

  stores.events.subscribe((topic) => {
    // a domain changed (removed, re-verified, new certificate elsewhere): drop what this instance holds
    if (topic.startsWith('domain:')) cache.delete(topic.slice('domain:'.length));
    else if (topic === '*') cache.clear();
    // which may be a certificate stored or removed by another instance
    if (topic.startsWith('domain:') || topic === '*') gauges.summariseSoon();
  });

  const obtain = async (hostname: string, reason: 'verified' | 'handshake' | 'renewal' | 'retry' | 'reverify'): Promise<StoredCertificate | null> =>
    (await ordering.obtain(hostname, reason)).certificate;

  return {
    // The certificate lookup for one handshake:
    // 1. normalise the SNI; unknown names and API hosts get the fallback (no store read, no order);
    // 2. default hostnames of projects: the operator's wildcard certificate, else the fallback;
    // 3. the SecureContext cache (LRU) — a hit needs no disk or Redis read;
    // 4. the store; a stored, unexpired certificate is cached and served (also while Redis or the CA is down);
    // 5. a verified domain without one: order it now, wait up to onDemandWaitMs, else the fallback.
    async secureContext(servername: string): Promise<tls.SecureContext | null> {
      const hostname = normaliseHostname(servername);
      const route = routes.resolve(hostname);
      const isDefault = hostname.endsWith(platformSuffix);
      if (route.kind === 'unknown' || route.kind === 'api') return null;
      if (isDefault) return platformContext;
      const hit = cache.get(hostname);
      if (hit && hit.notAfter > now()) {
        metrics.sniCacheHits.inc();
        return hit.context;
      }
      metrics.sniCacheMisses.inc();
      const stored = await certs.certificates.get(hostname).catch((err) => {
        log.warn({ hostname, err: (err as Error).message }, 'certificate store unavailable during a handshake');
        return null;
      });
      if (stored && Date.parse(stored.notAfter) > now()) return cache.contextFor(stored);
      const ordered = await Promise.race([obtain(hostname, 'handshake'), new Promise<null>((r) => setTimeout(() => r(null), waitMs).unref())]).catch(() => null);
      return ordered ? cache.contextFor(ordered) : null;
    },

    /** A domain just verified (or asked to try again): order now, without waiting for a handshake. */
    onVerified(domain: Domain, reason: 'verify' | 'reverify'): void {
      // a verified domain stays verified when the check just run found something (its diagnostics are
      // that check's; only health counts failures): no order then, the CA's validation would fail too
      if (domain.diagnostics.length > 0) {
        log.info({ hostname: domain.hostname, reason }, 'no certificate order: the DNS check just run failed');
        return;
      }
      // Re-verify: the backoff is reset and an attempt starts, which orders only when the certificate
      // needs replacing (ordering.ts)
      const start = async () => {
        if (reason === 'reverify') await ordering.reset(domain.hostname);
        await obtain(domain.hostname, reason === 'reverify' ? 'reverify' : 'verified');
      };
      track(start().catch((err) => log.warn({ hostname: domain.hostname, err: (err as Error).message }, 'could not start a certificate order')));
    },

    /**
     * A removed domain: its certificate leaves the cache (every instance, via the domain notice) and
     * the store, its place in the order queue and its renewal and retry jobs go. An order already
     * with the CA finds the domain gone when the CA answers and keeps nothing (ordering.ts).
     */
    async onRemoved(hostname: string): Promise<void> {
      cache.delete(hostname);
      await certs.certificates.remove(hostname).catch(() => undefined);
      gauges.summariseSoon();
      await ordering.forget(hostname).catch((err) => log.warn({ hostname, err: (err as Error).message }, 'could not take a removed domain out of the order queue'));
      for (const kind of [RENEWAL_JOB, RETRY_JOB]) await jobs.cancel(kind, hostname);
    },

    /**
     * One maintenance pass: refresh the certificate gauges when they are due, renew what is due, look
     * at the queue, refresh the limit gauges (a failed first order is tried again by its own cert-retry job).
     * The store hands over only certificates whose renewal window has opened (their index is kept
     * in that order), so a pass costs what is due, not what is stored.
     */
    async sweep(): Promise<void> {
      // first, so the gauges have figures from the start
      if (gauges.due()) await gauges.summarise();
      let seen = 0;
      for (const { hostname, notBefore, notAfter } of await certs.certificates.due(now())) {
        // many due at once (a CA outage): let handshakes in between, every 500
        if (++seen % 500 === 0) await new Promise((r) => setImmediate(r));
        // the jitter is fixed per name, so each sweep agrees on when that name is due; the renewal
        // job re-reads the certificate (ARI may have moved it) and orders only when it is due
        if (now() >= renewAt(notBefore, notAfter, () => jitter(hostname))) {
          const next = await renewals.run(hostname);
          if (next !== null) jobs.wake(RENEWAL_JOB, hostname, next);
        }
      }
      await ordering.drainQueue();
      await options.refreshLimitMetrics?.().catch(() => undefined);
    },

    start(everyMs = 60_000): void {
      const run = () => this.sweep().catch((err) => log.warn({ err: (err as Error).message }, 'certificate maintenance failed'));
      timer = setInterval(run, everyMs);
      timer.unref();
      // reads only validities, asynchronously: it does not hold up start-up or handshakes
      void run();
    },

    setPlatform(platform: { cert: string; key: string } | null): void {
      platformContext = platform ? tls.createSecureContext(platform) : null;
    },

    stop(): void {
      if (timer) clearInterval(timer);
      gauges.stop();
      jobs.stop();
    },

    /** Queued orders and renewals run as the scheduler's jobs from now on (due times in the state backend). */
    useScheduler(shared: Scheduler): void {
      jobs.useScheduler(shared);
    },

    /** for tests and metrics */
    cacheSize: () => cache.size,
    /** resolves once the background work this process started (its timers, renewal planning) has ended (tests) */
    async idle(): Promise<void> {
      while (running.size > 0) await Promise.allSettled([...running]);
    },
    obtain,
  };
}

export type CertificateManager = ReturnType<typeof createCertificateManager>;
