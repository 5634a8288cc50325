// A failed order waits before the next try, longer with each failure in a row (or as long as the CA's
// Retry-After asks), and the owner's Re-verify forgets that wait. What a failure writes on the domain
// and when its next try comes.
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { Domain, DomainStore, Stores } from '../state/types.ts';
import { setCertificateState } from './certificate-state.ts';
import type { IssueError } from './issue-error.ts';
import type { OrderQueue } from './order-queue.ts';
import type { StoredCertificate } from './types.ts';

// about 1 m, 2 m, 5 m, 10 m, 30 m, 1 h, 2 h, 4 h, then 6 h
const BACKOFF_MS = [60e3, 120e3, 300e3, 600e3, 1800e3, 3600e3, 7200e3, 14400e3, 21600e3];

export function backoffFor(failures: number): number {
  return BACKOFF_MS[Math.min(Math.max(failures, 1), BACKOFF_MS.length) - 1];
}

// what backOff() needs of ordering.ts's options
export interface BackoffOptions {
  stores: Stores;
  queue: OrderQueue;
  log: Logger;
  metrics: Metrics;
  now: () => number;
  onRetryDue(hostname: string, at: number): void;
}

/** No issuer could issue the order placed for `domain` (`err`: the last one's); `valid`: what it would have renewed. */
export async function backOff(options: BackoffOptions, domain: Domain, valid: StoredCertificate | null, err: IssueError): Promise<void> {
  const { stores, queue, log, metrics, now } = options;
  const { hostname } = domain;
  metrics.acmeOrders.inc({ result: 'failure' });
  await queue.remove(hostname);
  const failures = (domain.certificate.failures ?? 0) + 1;
  const delay = Math.max(backoffFor(failures), (err.retryAfterSeconds ?? 0) * 1000);
  await setCertificateState(stores.domains, hostname, (d) => ({
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
}

/**
 * The owner fixed something: forget the backoff and try at once. A domain in line keeps its
 * place and its turn (queued shows queuePosition and nextAttemptAt): a CA limit is not a backoff.
 */
export async function resetBackoff(domains: DomainStore, hostname: string): Promise<void> {
  await setCertificateState(domains, hostname, (d) => {
    const inLine = d.certificate.status === 'queued' || d.certificate.queuePosition !== undefined;
    return { ...d.certificate, failures: 0, ...(inLine ? {} : { nextAttemptAt: undefined }) };
  });
}
