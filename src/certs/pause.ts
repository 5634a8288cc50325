// No order while a domain's DNS points elsewhere (DESIGN §6): the CA's validation would fail and
// count against its failed-validation limit. What a paused order writes (out of the queue, the
// renewal said paused once) and when a first certificate is looked at again.
import { domainEvent } from '../domains/events.ts';
import type { Domain, Stores } from '../state/types.ts';
import { setCertificateState } from './certificate-state.ts';
import type { OrderQueue } from './order-queue.ts';
import type { OrderReason, OrderResult, StoredCertificate } from './types.ts';

// a first certificate paused by a misconfigured domain is looked at again after this (as renewals are)
export const PAUSE_RECHECK_MS = 3_600_000;

// what pause() needs of ordering.ts's options
export interface PauseOptions {
  stores: Stores;
  queue: OrderQueue;
  now: () => number;
  onRetryDue(hostname: string, at: number): void;
}

/**
 * A misconfigured domain waits out of line: a renewal's own job looks again (renewal.ts); a first
 * certificate's cert-retry job does, once an hour, and orders when the domain is healthy again.
 */
export async function pause(options: PauseOptions, domain: Domain, valid: StoredCertificate | null, reason: OrderReason): Promise<OrderResult> {
  const { stores, queue, now } = options;
  const { hostname } = domain;
  // out of the queue: it would hold a place (and the depth) it cannot use
  const waiting = domain.certificate.status === 'queued' || domain.certificate.queuePosition !== undefined;
  if (reason === 'queue' || waiting) await queue.remove(hostname);
  if (waiting) {
    await setCertificateState(stores.domains, hostname, (d) => ({ ...d.certificate, status: d.certificate.status === 'queued' ? 'none' : d.certificate.status, queuePosition: undefined, nextAttemptAt: undefined }));
  }
  // the renewal came due: said once on the timeline (its job looks again every hour, writing nothing),
  // with the date the certificate runs out, which the owner now races against
  if (reason === 'renewal' && valid && !domain.certificate.renewalPausedAt) {
    await setCertificateState(stores.domains, hostname, (d) => ({ ...d.certificate, renewalPausedAt: new Date(now()).toISOString() }), domainEvent(
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
