// When each certificate renews (DESIGN §6): at a random moment in the window the CA suggests through
// ACME Renewal Information (RFC 9773 §4.2) when its directory offers `renewalInfo`, asking again
// when its Retry-After says; else in the last third of the lifetime, minus a fixed jitter per name.
// The moment is a stored due time (the scheduler's `cert-renewal` job), said on the timeline.
import { domainEvent } from '../domains/events.ts';
import type { Logger } from '../log.ts';
import type { Stores } from '../state/types.ts';
import { pickRenewalTime, type RenewalInfo } from './ari.ts';
import type { Ordering } from './ordering.ts';
import { renewAt, type CertStores, type StoredCertificate } from './types.ts';

// a paused renewal (misconfigured domain, CA without an answer) is looked at again after this
const RECHECK_MS = 3_600_000;
// without an answer from the CA's renewal information, ask again after this (RFC 9773 §4.3.3)
const ARI_RETRY_MS = 6 * 3_600_000;

export interface RenewalOptions {
  stores: Stores;
  certs: CertStores;
  ordering: Ordering;
  renewalInfo?(stored: StoredCertificate): Promise<(RenewalInfo & { certId: string }) | null>;
  jitter(hostname: string): number;
  now(): number;
  log: Logger;
  /** stores the due time of a hostname's `cert-renewal` job */
  wake(hostname: string, at: number): void;
}

/** the latest moment a renewal may be planned for: a sixth of the lifetime before expiry */
function latestSafe(stored: StoredCertificate): number {
  const end = Date.parse(stored.notAfter);
  return end - (end - Date.parse(stored.notBefore)) / 6;
}

export function createRenewals(options: RenewalOptions) {
  const { stores, certs, ordering, log, now } = options;

  /** The renewal moment of the last third of the lifetime: Portico's own, without the CA's window. */
  function lastThird(stored: StoredCertificate): number {
    return renewAt(stored.notBefore, stored.notAfter, () => options.jitter(stored.hostname));
  }

  /**
   * When the certificate is to be replaced (ms): in the CA's window (ARI) when it leaves a sixth of the
   * lifetime before expiry, else in the last third. A window that ends after the certificate does (a
   * CA's mistake or a clock) would let it lapse: the first visit after expiry then orders on demand,
   * and with the CA slow or down gets the fallback certificate.
   */
  function renewalMoment(stored: StoredCertificate): number {
    const ari = stored.ari?.renewAt;
    return ari !== undefined && ari <= latestSafe(stored) ? ari : lastThird(stored);
  }

  /** When its job should next run: the renewal, or asking the CA again, whichever comes first. */
  function nextRun(stored: StoredCertificate): number {
    return Math.min(renewalMoment(stored), stored.ari?.pollAt ?? Infinity);
  }

  async function askCa(stored: StoredCertificate): Promise<(RenewalInfo & { certId: string }) | null> {
    return (await options.renewalInfo?.(stored).catch((err) => {
      log.warn({ hostname: stored.hostname, err: (err as Error).message }, 'could not fetch renewal information');
      return null;
    })) ?? null;
  }

  /** A new certificate: pick its renewal moment, store it, say it on the timeline, schedule it. */
  async function plan(stored: StoredCertificate): Promise<void> {
    const info = await askCa(stored);
    let message: string;
    if (info) {
      stored.ari = { renewAt: pickRenewalTime(info.window, now()), pollAt: info.pollAt, certId: info.certId };
      await certs.certificates.put(stored);
      const window = `${new Date(info.window.start).toISOString()} to ${new Date(info.window.end).toISOString()}`;
      message = stored.ari.renewAt <= latestSafe(stored)
        ? `Renewal planned for ${new Date(stored.ari.renewAt).toISOString()}, inside the window the CA suggests (${window}).`
        : `The CA suggests renewing from ${window}, too close to or after the certificate's expiry (${stored.notAfter}): renewal planned for ${new Date(lastThird(stored)).toISOString()}, in the last third of its lifetime.`;
    } else {
      message = `Renewal planned for ${new Date(renewalMoment(stored)).toISOString()}, in the last third of the certificate's lifetime.`;
    }
    const at = renewalMoment(stored);
    await stores.domains.appendEvent(stored.hostname, domainEvent('renewal_scheduled', message, { renewAt: new Date(at).toISOString(), ari: info !== null }, now()));
    options.wake(stored.hostname, nextRun(stored));
  }

  /**
   * The `cert-renewal` job of one hostname: ask the CA again when due, renew when the moment has
   * come. Answers when to run next (null: nothing left to do — the new certificate plans its own).
   */
  async function run(hostname: string): Promise<number | null> {
    const stored = await certs.certificates.get(hostname);
    if (!stored) return null;
    if (stored.ari && now() >= stored.ari.pollAt && now() < stored.ari.renewAt) {
      const info = await askCa(stored);
      if (info) {
        // a window that no longer holds the picked moment gets a new pick (§4.2); one that does keeps it
        const keep = stored.ari.renewAt >= info.window.start && stored.ari.renewAt < info.window.end;
        stored.ari = { renewAt: keep ? stored.ari.renewAt : pickRenewalTime(info.window, now()), pollAt: info.pollAt, certId: info.certId };
        if (!keep) await stores.domains.appendEvent(hostname, domainEvent('renewal_scheduled', `The CA moved its renewal window: renewal now planned for ${new Date(renewalMoment(stored)).toISOString()}.`, { renewAt: new Date(renewalMoment(stored)).toISOString(), ari: true }, now()));
      } else {
        stored.ari = { ...stored.ari, pollAt: now() + ARI_RETRY_MS };
      }
      await certs.certificates.put(stored);
    }
    if (now() < renewalMoment(stored)) return nextRun(stored);
    const domain = await stores.domains.get(hostname);
    if (!domain) return null;
    const next = domain.certificate.nextAttemptAt ? Date.parse(domain.certificate.nextAttemptAt) : 0;
    // in backoff after a failed renewal, or waiting in the queue: the queue or the backoff decides
    if (domain.certificate.status === 'queued') return null;
    if (next > now()) return next;
    const result = await ordering.obtain(hostname, 'renewal');
    if (result.queued) return null;
    const after = await certs.certificates.get(hostname);
    // renewed: the new certificate planned its own job; paused (misconfigured) or failed: look again
    if (after && after.notBefore !== stored.notBefore) return null;
    const retry = (await stores.domains.get(hostname))?.certificate.nextAttemptAt;
    return retry && Date.parse(retry) > now() ? Date.parse(retry) : now() + RECHECK_MS;
  }

  return {
    plan,
    run,
    /** is the renewal moment of this certificate here (ordering re-checks it under the lock) */
    isDue: (stored: StoredCertificate) => now() >= renewalMoment(stored),
  };
}

export type Renewals = ReturnType<typeof createRenewals>;
