// Stores for certificates and what obtaining them needs: HTTP-01 challenges, cross-instance locks and
// the ACME account key. Two backends: file-store.ts (certs dir, one process) and
// redis-store.ts (shared). "Not found" is null; writes resolve once durable. Also why a certificate
// is ordered and what the order answers (ordering.ts and the files it hands steps to).

export interface StoredCertificate {
  hostname: string;
  /** leaf + chain, PEM */
  certPem: string;
  keyPem: string;
  notBefore: string;
  notAfter: string;
  issuer: string;
  /** the ACME directory that issued it (the CA to ask for renewal information and to replace it at) */
  directory?: string;
  /**
   * ACME Renewal Information (RFC 9773), when the CA offers it: the moment picked in its window and
   * when to ask again (ms since the epoch). Absent: the last third of the lifetime.
   */
  ari?: { renewAt: number; pollAt: number; certId: string };
}

export interface Validity {
  hostname: string;
  notBefore: string;
  notAfter: string;
}

/** Stored certificates by time left, for metrics. */
export interface ExpirySummary {
  /** the earliest notAfter (ms since the epoch), null when none is stored */
  earliest: number | null;
  lt7d: number;
  lt30d: number;
  ge30d: number;
}

export interface CertificateStore {
  get(hostname: string): Promise<StoredCertificate | null>;
  put(certificate: StoredCertificate): Promise<void>;
  remove(hostname: string): Promise<void>;
  /**
   * Certificates whose renewal window (renewalOpens) has opened by `until`, read from an index kept
   * in that order: a sweep reads what is due, not every certificate.
   */
  due(until: number): Promise<Validity[]>;
  summary(now: number): Promise<ExpirySummary>;
}

/**
 * When to renew: the last third of the lifetime, minus up to 1/30 of it (`random()` in [0, 1): the
 * jitter that spreads renewals).
 */
export function renewAt(notBefore: string, notAfter: string, random: () => number): number {
  const start = Date.parse(notBefore);
  const end = Date.parse(notAfter);
  const lifetime = end - start;
  return end - lifetime / 3 - random() * (lifetime / 30);
}

/** The earliest moment any jitter renews it: what the stores index certificates by. */
export function renewalOpens(notBefore: string, notAfter: string): number {
  return renewAt(notBefore, notAfter, () => 1);
}

export interface ChallengeStore {
  /** the key authorisation for an HTTP-01 token (RFC 8555 §8.3), answered by any instance */
  get(token: string): Promise<string | null>;
  set(token: string, keyAuthorization: string): Promise<void>;
  remove(token: string): Promise<void>;
}

export interface LockStore {
  /** an owner token when acquired, null when someone else holds it; it expires after ttlMs */
  acquire(name: string, ttlMs: number): Promise<string | null>;
  /** releases only if `token` still owns it */
  release(name: string, token: string): Promise<void>;
  /** gives a lock `token` still owns another ttlMs; false when it no longer owns it (expired, taken) */
  extend(name: string, token: string, ttlMs: number): Promise<boolean>;
}

export interface AccountKeyStore {
  load(): Promise<string | null>;
  save(pem: string): Promise<void>;
}

export interface CertStores {
  certificates: CertificateStore;
  challenges: ChallengeStore;
  locks: LockStore;
  accountKey: AccountKeyStore;
}

export type OrderReason = 'verified' | 'handshake' | 'renewal' | 'retry' | 'queue' | 'reverify';

export interface OrderResult {
  certificate: StoredCertificate | null;
  /** over a CA limit: in the queue; `accountWide` when every order waits, not only this domain's */
  queued?: { retryAt: number; accountWide: boolean };
  /** the domain's DNS points elsewhere: nothing was sent to the CA (its validation would fail) */
  paused?: true;
}
