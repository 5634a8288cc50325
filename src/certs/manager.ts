// Certificates for custom domains: picked per SNI, obtained on their own once a domain verifies,
// renewed in the last third of their lifetime, retried with growing backoff, one order per name
// across every instance — and never an order for a name nobody verified.
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
import type { IssuedCertificate } from './acme-issuer.ts';

export interface Issuer {
  issue(hostname: string): Promise<IssuedCertificate>;
}

export interface ManagerOptions {
  stores: Stores;
  certs: CertStores;
  issuer: Issuer;
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
}

function hashJitter(hostname: string): number {
  return createHash('sha256').update(hostname).digest().readUInt32BE(0) / 2 ** 32;
}

// about 1 m, 2 m, 5 m, 10 m, 30 m, 1 h, 2 h, 4 h, then 6 h
const BACKOFF_MS = [60e3, 120e3, 300e3, 600e3, 1800e3, 3600e3, 7200e3, 14400e3, 21600e3];
const LOCK_TTL_MS = 120_000;
// the certificate gauges need no fresher figures than this
const SUMMARY_EVERY_MS = 600_000;

export function backoffFor(failures: number): number {
  return BACKOFF_MS[Math.min(Math.max(failures, 1), BACKOFF_MS.length) - 1];
}

export { renewAt };

export function createCertificateManager(options: ManagerOptions) {
  const { stores, certs, issuer, routes, log, metrics } = options;
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
  const inFlight = new Map<string, Promise<StoredCertificate | null>>();
  let platformContext = options.platform ? tls.createSecureContext(options.platform) : null;
  const platformSuffix = `.${options.platformDomain}`;
  let timer: NodeJS.Timeout | null = null;
  // failed orders waiting for their backoff to end, retried by sweep() (a restart forgets them; the
  // next handshake for the name starts over, still within the backoff recorded on the domain)
  const retries = new Map<string, number>();
  let summarisedAt = -Infinity;

  stores.events.subscribe((topic) => {
    // a domain changed (removed, re-verified, new certificate elsewhere): drop what this instance holds
    if (topic.startsWith('domain:')) cache.delete(topic.slice('domain:'.length));
    else if (topic === '*') cache.clear();
  });

  function contextFor(stored: StoredCertificate) {
    const entry = { context: contexts.make(stored.certPem, stored.keyPem), notAfter: Date.parse(stored.notAfter) };
    cache.set(stored.hostname, entry);
    return entry.context;
  }

  async function setCertificateState(hostname: string, update: (domain: Domain) => Domain['certificate']): Promise<void> {
    const domain = await stores.domains.get(hostname);
    if (!domain) return;
    await stores.domains.setCertificate(hostname, update(domain));
  }

  /**
   * Orders a certificate for a verified domain, once per name at a time in this instance and across
   * instances (lock). Resolves with the stored certificate, or null when none could be had now.
   */
  function obtain(hostname: string, reason: 'verified' | 'handshake' | 'renewal' | 'retry'): Promise<StoredCertificate | null> {
    const running = inFlight.get(hostname);
    if (running) return running;
    const work = (async () => {
      // 1. only verified domains, read fresh from the store (never the cache), get an order
      const domain = await stores.domains.get(hostname);
      if (!domain || domain.status !== 'verified') return null;
      if (reason !== 'renewal' && reason !== 'retry') {
        const existing = await certs.certificates.get(hostname);
        if (existing && Date.parse(existing.notAfter) > now()) return existing;
      }
      const next = domain.certificate.nextAttemptAt ? Date.parse(domain.certificate.nextAttemptAt) : 0;
      if (reason !== 'retry' && domain.certificate.status === 'failed' && next > now()) return null;
      // 2. one instance orders; the others find the result in the store
      const lock = await certs.locks.acquire(`cert:${hostname}`, LOCK_TTL_MS);
      if (!lock) return waitForOther(hostname);
      const started = now();
      try {
        await setCertificateState(hostname, (d) => ({ ...d.certificate, status: d.certificate.status === 'issued' ? 'issued' : 'pending' }));
        const issued = await issuer.issue(hostname);
        const stored: StoredCertificate = { hostname, ...issued };
        await certs.certificates.put(stored);
        await setCertificateState(hostname, () => ({ status: 'issued', issuer: issued.issuer, notAfter: issued.notAfter }));
        metrics.acmeOrders.inc({ result: 'success' });
        metrics.acmeOrderDuration.observe((now() - started) / 1000);
        log.info({ hostname, notAfter: issued.notAfter, reason }, 'certificate issued');
        await stores.events.publish(`domain:${hostname}`);
        return stored;
      } catch (err) {
        const kind = (err as { kind?: string }).kind ?? 'ca';
        const retryAfter = (err as { retryAfterSeconds?: number }).retryAfterSeconds;
        metrics.acmeOrders.inc({ result: 'failure' });
        await setCertificateState(hostname, (d) => {
          const failures = (d.certificate.failures ?? 0) + 1;
          const delay = Math.max(backoffFor(failures), (retryAfter ?? 0) * 1000);
          return {
            ...d.certificate,
            status: d.certificate.status === 'issued' && d.certificate.notAfter && Date.parse(d.certificate.notAfter) > now() ? 'issued' : 'failed',
            lastError: `${kind}: ${(err as Error).message}`,
            nextAttemptAt: new Date(now() + delay).toISOString(),
            failures,
          };
        }).catch(() => undefined);
        retries.set(hostname, now() + Math.max(backoffFor((domain.certificate.failures ?? 0) + 1), (retryAfter ?? 0) * 1000));
        log.warn({ hostname, kind, err: (err as Error).message }, 'certificate order failed');
        return null;
      } finally {
        await certs.locks.release(`cert:${hostname}`, lock).catch(() => undefined);
      }
    })().finally(() => inFlight.delete(hostname));
    inFlight.set(hostname, work);
    return work;
  }

  /** Another instance holds the order: wait for its certificate, or for it to give up. */
  async function waitForOther(hostname: string): Promise<StoredCertificate | null> {
    const deadline = now() + waitMs;
    while (now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
      const stored = await certs.certificates.get(hostname).catch(() => null);
      if (stored && Date.parse(stored.notAfter) > now()) return stored;
      const domain = await stores.domains.get(hostname).catch(() => null);
      if (!domain || domain.certificate.status === 'failed') return null;
    }
    return null;
  }

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
      const start = async () => {
        if (reason === 'reverify') {
          // the owner fixed something: forget the backoff and try at once
          retries.delete(domain.hostname);
          await setCertificateState(domain.hostname, (d) => ({ ...d.certificate, nextAttemptAt: undefined, failures: 0 }));
        }
        await obtain(domain.hostname, reason === 'reverify' ? 'retry' : 'verified');
      };
      start().catch((err) => log.warn({ hostname: domain.hostname, err: (err as Error).message }, 'could not start a certificate order'));
    },

    /** A removed domain: its certificate leaves the cache (every instance, via the domain notice) and the store. */
    async onRemoved(hostname: string): Promise<void> {
      cache.delete(hostname);
      await certs.certificates.remove(hostname).catch(() => undefined);
    },

    /**
     * One maintenance pass: renew what is due, retry failures whose backoff ended, refresh metrics.
     * The store hands over only certificates whose renewal window has opened (their index is kept
     * in that order), so a pass costs what is due, not what is stored.
     */
    async sweep(): Promise<void> {
      let seen = 0;
      for (const { hostname, notBefore, notAfter } of await certs.certificates.due(now())) {
        // many due at once (a CA outage): let handshakes in between, every 500
        if (++seen % 500 === 0) await new Promise((r) => setImmediate(r));
        // the jitter is fixed per name, so each sweep agrees on when that name is due
        if (now() >= renewAt(notBefore, notAfter, () => jitter(hostname))) {
          const domain = await stores.domains.get(hostname);
          const next = domain?.certificate.nextAttemptAt ? Date.parse(domain.certificate.nextAttemptAt) : 0;
          if (next <= now()) await obtain(hostname, 'renewal');
        }
      }
      for (const [hostname, due] of retries) {
        if (due > now()) continue;
        retries.delete(hostname);
        await obtain(hostname, 'retry');
      }
      if (now() - summarisedAt >= SUMMARY_EVERY_MS || now() < summarisedAt) {
        const { earliest, ...buckets } = await certs.certificates.summary(now());
        for (const [bucket, n] of Object.entries(buckets)) metrics.certificates.set({ expires_in: bucket }, n);
        if (earliest !== null) metrics.certificatesEarliestExpiry.set(earliest / 1000);
        summarisedAt = now();
      }
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
    },

    /** for tests and metrics */
    cacheSize: () => cache.size,
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
