// Stores for certificates and what obtaining them needs: HTTP-01 challenges, cross-instance locks and
// the ACME account key. Two backends: file-store.ts (certs dir, one process) and
// redis-store.ts (shared). "Not found" is null; writes resolve once durable.

export interface StoredCertificate {
  hostname: string;
  /** leaf + chain, PEM */
  certPem: string;
  keyPem: string;
  notBefore: string;
  notAfter: string;
  issuer: string;
}

export interface CertificateStore {
  get(hostname: string): Promise<StoredCertificate | null>;
  put(certificate: StoredCertificate): Promise<void>;
  remove(hostname: string): Promise<void>;
  /** every stored certificate's validity, for renewal and metrics (no PEMs: cheap, also at 100k) */
  expiries(): Promise<Array<{ hostname: string; notBefore: string; notAfter: string }>>;
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
