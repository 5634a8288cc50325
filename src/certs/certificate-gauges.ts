// The certificate gauges (portico_certificates{expires_in} and the earliest expiry), read from the
// certificate store, which every instance writes: soon after a certificate is stored or removed,
// here or on another instance, and from the sweep at least every ten minutes.
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { CertStores } from './types.ts';

// the certificate gauges are read again this soon after a certificate is stored or removed (a burst
// of changes, a queue draining, is one read), and at least this often (expiring moves the buckets)
const SUMMARY_AFTER_CHANGE_MS = 1_000;
const SUMMARY_EVERY_MS = 600_000;

export interface CertificateGaugesOptions {
  certs: CertStores;
  metrics: Metrics;
  log: Logger;
  now: () => number;
  /** hands a read to the manager, whose idle() waits for it */
  track(work: Promise<unknown>): void;
}

export function createCertificateGauges(options: CertificateGaugesOptions) {
  const { certs, metrics, log, now } = options;
  let stopped = false;
  let summarisedAt = -Infinity;
  let summaryDue: NodeJS.Timeout | null = null;
  let summarising: Promise<void> | null = null;

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
    });
    summarising = read;
    options.track(read);
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

  return {
    summarise,
    summariseSoon,
    // also when the clock went back past the last read
    due: () => now() - summarisedAt >= SUMMARY_EVERY_MS || now() < summarisedAt,
    stop(): void {
      stopped = true;
      if (summaryDue) clearTimeout(summaryDue);
      summaryDue = null;
    },
  };
}
