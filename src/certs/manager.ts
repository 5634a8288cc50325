// Certificates for custom domains: picked per SNI, obtained on their own once a domain verifies
// (ordering.ts: issuers in order, CA limits, queue, backoff, one order per name across every
// instance — and never an order for a name nobody verified), renewed when the CA's renewal
// information says (RFC 9773) or else in the last third of their lifetime.
import tls from 'node:tls';
import { X509Certificate, createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { afterReads } from '../after-reads.ts';
import { createContextMaker } from './secure-contexts.ts';
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
import { createOrdering, backoffFor, PAUSE_RECHECK_MS } from './ordering.ts';

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

// the certificate gauges are read again this soon after a certificate is stored or removed (a burst
// of changes, a queue draining, is one read), and at least this often (expiring moves the buckets)
const SUMMARY_AFTER_CHANGE_MS = 1_000;
const SUMMARY_EVERY_MS = 600_000;
// the scheduler's job kinds: working through the order queue, one certificate's renewal, and the
// next try of a failed first order
const QUEUE_JOB = 'acme-queue';
const RENEWAL_JOB = 'cert-renewal';
const RETRY_JOB = 'cert-retry';

export { renewAt, backoffFor };

export function createCertificateManager(options: ManagerOptions) {
  const { stores, certs, routes, log, metrics } = options;
  const now = options.now ?? Date.now;
  const jitter = options.jitter ?? hashJitter;
  const waitMs = options.onDemandWaitMs ?? 10_000;
  // Each SecureContext holds ~37 KiB of OpenSSL memory that V8 does not see, so a context the LRU
  // drops would live on until some unrelated full collection: the bound would hold entries, not
  // memory (RSS grew ~35 MiB per 1,000 new names past it). A dropped context is therefore closed on
  // the next turn of the event loop: the handshake that was just handed it installs it when its
  // SNI callback runs, in this turn's microtasks (the OCSP answer comes synchronously too), and a
  // connection keeps its own reference to what it installed. Closing it any later only holds memory:
  // under a flood of new names, a second's worth of dropped contexts.
  const retire = (context: tls.SecureContext) => afterReads(() => closeContext(context));
  const cache = new LRUCache<string, { context: tls.SecureContext; notAfter: number }>({ max: options.cacheSize ?? 1_000, dispose: (entry) => retire(entry.context) });
  // a cold handshake loads its certificate into a context made ahead (about 0.2 ms instead of 0.5–1)
  const contexts = createContextMaker();
  let platformContext = options.platform ? tls.createSecureContext(options.platform) : null;
  const platformSuffix = `.${options.platformDomain}`;
  let timer: NodeJS.Timeout | null = null;
  let stopped = false;
  let summarisedAt = -Infinity;
  let summaryDue: NodeJS.Timeout | null = null;
  let summarising: Promise<void> | null = null;
  // due times of this manager's jobs: on the shared scheduler once useScheduler() is called (one
  // instance runs each, they survive restarts), else timers in this process (the sweep catches up)
  let scheduler: Scheduler | null = null;
  const local = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  const running = new Set<Promise<unknown>>();
  const jobs: Record<string, (key: string) => Promise<number | null>> = {
    [QUEUE_JOB]: async () => {
      await ordering.drainQueue();
      if ((await options.queue.size()) === 0) return null;
      // the next look when the first in line should have its turn (at least a second on, at most a minute)
      const turn = (await options.queueEstimates?.().catch(() => null))?.(1) ?? now() + 60_000;
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
      running.add(set);
      void set.finally(() => running.delete(set));
      return;
    }
    const id = `${kind} ${key}`;
    const known = local.get(id);
    if (known && known.at <= at) return;
    if (known) clearTimeout(known.timer);
    const timer = setTimeout(() => {
      local.delete(id);
      const job = jobs[kind](key).then((next) => { if (next !== null) wake(kind, key, next); }, (err) => log.warn({ kind, key, err: (err as Error).message }, 'certificate work failed'));
      running.add(job);
      void job.finally(() => running.delete(job));
    }, Math.min(Math.max(at - now(), 0) + 20, 2 ** 31 - 1));
    timer.unref();
    local.set(id, { at, timer });
  }

  /**
   * The certificate gauges from the store: portico_certificates{expires_in} and the earliest expiry,
   * which has no sample while no certificate is stored (a 0 would read as "expired in 1970" to an
   * alert on `expiry - time()`). One read at a time; a change meanwhile is read by the next.
   */
  function summarise(): Promise<void> {
    if (summarising) {
      summariseSoon();
      return summarising;
    }
    const read = (async () => {
      const at = now();
      const { earliest, ...buckets } = await certs.certificates.summary(at);
      for (const [bucket, n] of Object.entries(buckets)) metrics.certificates.set({ expires_in: bucket }, n);
      if (earliest === null) metrics.certificatesEarliestExpiry.remove();
      else metrics.certificatesEarliestExpiry.set(earliest / 1000);
      summarisedAt = at;
    })().catch((err) => log.warn({ err: (err as Error).message }, 'could not read the certificate store for the certificate gauges')).finally(() => {
      summarising = null;
      running.delete(read);
    });
    summarising = read;
    running.add(read);
    return read;
  }

  /** a certificate was stored or removed (here, or on another instance: the domain's notice) */
  function summariseSoon(): void {
    if (stopped || summaryDue) return;
    summaryDue = setTimeout(() => {
      summaryDue = null;
      void summarise();
    }, SUMMARY_AFTER_CHANGE_MS);
    summaryDue.unref();
  }

  const ordering = createOrdering({
    stores, certs, chain: options.chain, queue: options.queue, log, metrics, now, waitMs,
    onIssued: (stored) => {
      summariseSoon();
      const planned = renewals.plan(stored).catch((err) => log.warn({ hostname: stored.hostname, err: (err as Error).message }, 'could not plan the renewal'));
      running.add(planned);
      void planned.finally(() => running.delete(planned));
    },
    onQueueDue: (at) => wake(QUEUE_JOB, 'all', at),
    onRetryDue: (hostname, at) => wake(RETRY_JOB, hostname, at),
    isDue: (stored) => renewals.isDue(stored),
    queueEstimates: () => options.queueEstimates?.() ?? Promise.resolve(null),
    ...(options.lockTtlMs ? { lockTtlMs: options.lockTtlMs } : {}),
  });
  const renewals = createRenewals({
    stores, certs, ordering, now, log, jitter,
    ...(options.renewalInfo ? { renewalInfo: options.renewalInfo } : {}),
    wake: (hostname, at) => wake(RENEWAL_JOB, hostname, at),
  });

  stores.events.subscribe((topic) => {
    // a domain changed (removed, re-verified, new certificate elsewhere): drop what this instance holds
    if (topic.startsWith('domain:')) cache.delete(topic.slice('domain:'.length));
    else if (topic === '*') cache.clear();
    // which may be a certificate stored or removed by another instance
    if (topic.startsWith('domain:') || topic === '*') summariseSoon();
  });

  function contextFor(stored: StoredCertificate) {
    const entry = { context: contexts.make(stored.certPem, stored.keyPem), notAfter: Date.parse(stored.notAfter) };
    cache.set(stored.hostname, entry);
    return entry.context;
  }

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
      if (stored && Date.parse(stored.notAfter) > now()) return contextFor(stored);
      const ordered = await Promise.race([obtain(hostname, 'handshake'), new Promise<null>((r) => setTimeout(() => r(null), waitMs).unref())]).catch(() => null);
      return ordered ? contextFor(ordered) : null;
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
      const started = start().catch((err) => log.warn({ hostname: domain.hostname, err: (err as Error).message }, 'could not start a certificate order'));
      running.add(started);
      void started.finally(() => running.delete(started));
    },

    /**
     * A removed domain: its certificate leaves the cache (every instance, via the domain notice) and
     * the store, its place in the order queue and its renewal and retry jobs go. An order already
     * with the CA finds the domain gone when the CA answers and keeps nothing (ordering.ts).
     */
    async onRemoved(hostname: string): Promise<void> {
      cache.delete(hostname);
      await certs.certificates.remove(hostname).catch(() => undefined);
      summariseSoon();
      await ordering.forget(hostname).catch((err) => log.warn({ hostname, err: (err as Error).message }, 'could not take a removed domain out of the order queue'));
      for (const kind of [RENEWAL_JOB, RETRY_JOB]) {
        const id = `${kind} ${hostname}`;
        clearTimeout(local.get(id)?.timer);
        local.delete(id);
        await scheduler?.cancel(kind, hostname).catch(() => undefined);
      }
    },

    /**
     * One maintenance pass: refresh the certificate gauges when they are due, renew what is due, look
     * at the queue, refresh the limit gauges (a failed first order is tried again by its own cert-retry job).
     * The store hands over only certificates whose renewal window has opened (their index is kept
     * in that order), so a pass costs what is due, not what is stored.
     */
    async sweep(): Promise<void> {
      // first, so the gauges have figures from the start
      if (now() - summarisedAt >= SUMMARY_EVERY_MS || now() < summarisedAt) await summarise();
      let seen = 0;
      for (const { hostname, notBefore, notAfter } of await certs.certificates.due(now())) {
        // many due at once (a CA outage): let handshakes in between, every 500
        if (++seen % 500 === 0) await new Promise((r) => setImmediate(r));
        // the jitter is fixed per name, so each sweep agrees on when that name is due; the renewal
        // job re-reads the certificate (ARI may have moved it) and orders only when it is due
        if (now() >= renewAt(notBefore, notAfter, () => jitter(hostname))) {
          const next = await renewals.run(hostname);
          if (next !== null) wake(RENEWAL_JOB, hostname, next);
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
      stopped = true;
      if (timer) clearInterval(timer);
      if (summaryDue) clearTimeout(summaryDue);
      summaryDue = null;
      for (const { timer: t } of local.values()) clearTimeout(t);
      local.clear();
    },

    /** Queued orders and renewals run as the scheduler's jobs from now on (due times in the state backend). */
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

/** Frees a SecureContext's OpenSSL state now (node's own close, not in its typings; absent: left to GC). */
function closeContext(context: tls.SecureContext): void {
  (context as { context?: { close?: () => void } }).context?.close?.();
}

/** Reads notBefore / notAfter / issuer from a PEM leaf. */
export function describeCertificate(certPem: string): { notBefore: string; notAfter: string; issuer: string } {
  const leaf = new X509Certificate(certPem);
  return { notBefore: new Date(leaf.validFrom).toISOString(), notAfter: new Date(leaf.validTo).toISOString(), issuer: leaf.issuer.split('\n').find((l) => l.startsWith('CN='))?.slice(3) ?? leaf.issuer };
}
