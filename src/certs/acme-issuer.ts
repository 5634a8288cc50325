// The ACME issuer: one HTTP-01 order per issue() call (acme-client 5), for an ECDSA P-256 key, at one
// directory (issuer-chain.ts tries the next). It does not decide *whether* to order (verification,
// locks, de-duplication, limits, backoff are the caller's); it places the order and says, as an
// IssueError kind, why one failed. The order's steps are acme-client's auto() spelt out (RFC 8555
// §7.4), so the order can carry `replaces` (RFC 9773 §5), the caller hears when it was placed, and a
// CA that refuses a poll ends the wait at once (acme-poll.ts).
//
// acme-client throws plain Errors carrying only the problem's `detail`, so why a request failed is
// read off the wire, per issue() call (acme-trace.ts). The account is opened once and shared by the
// orders (acme-account.ts); here it is opened again when the CA has forgotten it.
import { AsyncLocalStorage } from 'node:async_hooks';
import { X509Certificate } from 'node:crypto';
import tls from 'node:tls';
import * as acme from 'acme-client';
import { IssueError } from './issue-error.ts';
import { certId, fetchRenewalInfo, renewalInfoUrl, type RenewalInfo } from './ari.ts';
import { settle } from './acme-poll.ts';
import { classify, newTrace, traceRequests, type Trace } from './acme-trace.ts';
import { accountUnknown, openAccount } from './acme-account.ts';

// the stores this needs are in types.ts: challenges must be visible to every instance the CA may reach
import type { AccountKeyStore, ChallengeStore as StoredChallenges } from './types.ts';
export type { AccountKeyStore };
/** the issuer only places and removes tokens; the HTTP listener reads them */
export type ChallengeStore = Pick<StoredChallenges, 'set' | 'remove'>;

export interface IssuedCertificate {
  /** leaf first, then the chain */
  certPem: string;
  keyPem: string;
  /** ISO 8601 */
  notBefore: string;
  notAfter: string;
  /** the leaf's issuer CN (else O) */
  issuer: string;
}

export { IssueError, problemKind, type IssueErrorKind } from './issue-error.ts';

export interface AcmeIssuerOptions {
  directoryUrl: string;
  email: string | null;
  accountKeys: AccountKeyStore;
  challenges: ChallengeStore;
  /** PEM of a CA to trust for the directory's HTTPS, on top of the default store (pebble in tests) */
  ca?: string;
  /** first poll delay (ms) while the CA validates and finalises; doubles up to 30 s */
  backoffMin?: number;
  /** External Account Binding (RFC 8555 §7.3.4), for CAs that want one (ZeroSSL, Google Trust Services) */
  eab?: { kid: string; hmacKey: string } | null;
}

export interface OrderOptions {
  /** the ARI CertID of the certificate this one replaces (RFC 9773 §5) */
  replaces?: string;
  /** the CA accepted the order */
  onOrderPlaced?(orderUrl: string): void;
  /** the CA fetched the HTTP-01 answer and found it right */
  onChallengeValid?(): void;
  /**
   * The order failed because the CA no longer knows the account (a restart of a CA that keeps
   * accounts in memory): the account is registered again and the order placed once more, in this call.
   */
  onRetry?(error: IssueError): void;
}

export interface AcmeIssuer {
  issue(hostname: string, options?: OrderOptions): Promise<IssuedCertificate>;
  /**
   * The CA's renewal information for a certificate it issued (RFC 9773 §4), or null when its
   * directory offers none or it has no answer for this certificate.
   */
  renewalInfo(certPem: string, now: number): Promise<(RenewalInfo & { certId: string }) | null>;
  /** orders the CA created for this issuer since it was made */
  orders(): number;
  /** Portico's account URL at this CA (RFC 8555 §7.3), registering the account when it has none yet */
  accountUri(): Promise<string>;
}

export function createAcmeIssuer(options: AcmeIssuerOptions): AcmeIssuer {
  const { directoryUrl, email, accountKeys, challenges } = options;
  const backoffMin = options.backoffMin ?? 250;
  // one entry per certificate: OpenSSL reads only the first certificate of each entry
  const ca = options.ca === undefined ? undefined : [...tls.getCACertificates('default'), ...(options.ca.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [])];
  const traces = new AsyncLocalStorage<Trace>();
  let orderCount = 0;
  let account: Promise<acme.Client> | null = null;
  traceRequests(traces, () => { orderCount += 1; });

  // RFC 8555 §7.4: new order → authorisations → HTTP-01 answered (the client's own pre-check is
  // skipped: it would resolve the name with the system resolver, which need not be the CA's) →
  // finalize → certificate
  async function order(client: acme.Client, trace: Trace, hostname: string, csr: Buffer, options: OrderOptions, placed: () => void): Promise<string> {
    const created = await client.createOrder({ identifiers: [{ type: 'dns', value: hostname }], ...(options.replaces ? { replaces: options.replaces } : {}) } as Parameters<acme.Client['createOrder']>[0]);
    placed();
    options.onOrderPlaced?.(created.url);
    for (const authz of await client.getAuthorizations(created)) {
      if (authz.status === 'valid') continue;
      const challenge = authz.challenges.find((c) => c.type === 'http-01');
      if (challenge === undefined) throw new IssueError('ca', `the CA offered no http-01 challenge for ${hostname}`);
      const keyAuthorization = await client.getChallengeKeyAuthorization(challenge);
      try {
        await challenges.set(challenge.token, keyAuthorization);
      } catch (err) {
        throw new Error(`storing the HTTP-01 challenge for ${hostname}`, { cause: err });
      }
      try {
        await client.completeChallenge(challenge);
        // the authorisation is what the CA settles (§7.5.1); its failed challenge says why
        await settle(trace, 'HTTP-01 validation', backoffMin, async () => (await client.getAuthorizations({ ...created, authorizations: [authz.url] }))[0]);
        options.onChallengeValid?.();
      } finally {
        await challenges.remove(challenge.token).catch(() => undefined);
      }
    }
    const finalized = await client.finalizeOrder(created, csr);
    return client.getCertificate(finalized.status === 'valid' ? finalized : await settle(trace, 'order', backoffMin, () => client.getOrder(finalized)));
  }

  async function issue(hostname: string, options: OrderOptions = {}): Promise<IssuedCertificate> {
    const [keyPem, csr] = await acme.crypto.createCsr(csrNames(hostname), await acme.crypto.createPrivateEcdsaKey('P-256'));
    let ordered = false;
    const placed = () => { ordered = true; };
    try {
      return describe(await orderWithAccount(hostname, csr, options, placed), keyPem.toString());
    } catch (err) {
      if (!(err instanceof IssueError) && err instanceof Error && err.message.startsWith('storing the HTTP-01')) throw err;
      if (err instanceof IssueError) err.ordered ||= ordered;
      throw err;
    }
  }

  /** the account the orders use, opened once and shared; dropped when opening it failed */
  function currentAccount(): Promise<acme.Client> {
    const opening = account ??= openAccount({ directoryUrl, email, accountKeys, backoffMin, eab: options.eab, ca }, traces).catch((err: unknown) => { if (account === opening) account = null; throw err; });
    return opening;
  }

  // A CA may forget the account (pebble keeps accounts in memory; a CA may purge or deactivate
  // one): the cached client then fails every order with accountDoesNotExist. The account is
  // dropped so the next openAccount() looks it up or registers it again, and the order is tried
  // once more at once, so the caller does not wait out a backoff for the CA's amnesia.
  async function orderWithAccount(hostname: string, csr: Buffer, options: OrderOptions, placed: () => void, again = true): Promise<string> {
    const opened = currentAccount();
    const client = await opened;
    const trace = newTrace(ca);
    try {
      return await traces.run(trace, () => order(client, trace, hostname, csr, options, placed));
    } catch (err) {
      if (!(err instanceof IssueError) && err instanceof Error && err.message.startsWith('storing the HTTP-01')) throw err;
      const failure = classify(err, trace, `ordering a certificate for ${hostname}`, directoryUrl);
      if (!accountUnknown(failure)) throw failure;
      // concurrent orders on the old client each see this: only the first drops it
      if (account === opened) account = null;
      if (!again) throw failure;
      options.onRetry?.(failure);
      return orderWithAccount(hostname, csr, options, placed, false);
    } finally {
      trace.agent.destroy();
    }
  }

  let renewalInfoBase: Promise<string | null> | null = null;
  async function renewalInfo(certPem: string, now: number): Promise<(RenewalInfo & { certId: string }) | null> {
    const trace = newTrace(ca);
    try {
      renewalInfoBase ??= renewalInfoUrl(directoryUrl, trace.agent).catch((err: unknown) => { renewalInfoBase = null; throw err; });
      const base = await renewalInfoBase;
      if (base === null) return null;
      const id = certId(certPem);
      const info = await fetchRenewalInfo(base, id, trace.agent, now);
      return info === null ? null : { ...info, certId: id };
    } finally {
      trace.agent.destroy();
    }
  }

  return { issue, renewalInfo, orders: () => orderCount, accountUri: async () => (await currentAccount()).getAccountUrl() };
}

function describe(certPem: string, keyPem: string): IssuedCertificate {
  const leafPem = certPem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/)?.[0];
  if (leafPem === undefined) throw new IssueError('ca', 'the CA returned no certificate');
  const leaf = new X509Certificate(leafPem);
  const field = (name: string) => leaf.issuer.split('\n').find((line) => line.startsWith(`${name}=`))?.slice(name.length + 1);
  return {
    certPem,
    keyPem,
    notBefore: leaf.validFromDate.toISOString(),
    notAfter: leaf.validToDate.toISOString(),
    issuer: field('CN') ?? field('O') ?? leaf.issuer,
  };
}

/** A common name holds 64 characters (RFC 5280's ub-common-name; Let's Encrypt refuses a longer one as
 * a bad CSR), a hostname 253: a longer one is named by its SAN alone, which is what CAs go by. */
export function csrNames(hostname: string): { commonName?: string; altNames: string[] } {
  return hostname.length <= 64 ? { commonName: hostname, altNames: [hostname] } : { altNames: [hostname] };
}
