// The ACME issuer: one HTTP-01 order per issue() call (acme-client 5), for an ECDSA P-256 key, at one
// directory (issuer-chain.ts tries the next). It does not decide *whether* to order (verification,
// locks, de-duplication, limits, backoff are the caller's); it places the order and says, as an
// IssueError kind, why one failed. The order's steps are acme-client's auto() spelt out (RFC 8555
// §7.4), so the order can carry `replaces` (RFC 9773 §5), the caller hears when it was placed, and a
// CA that refuses a poll ends the wait at once (acme-poll.ts).
//
// acme-client throws plain Errors carrying only the problem's `detail`, so the problem `type`
// (RFC 8555 §6.7) and Retry-After are read off the responses themselves: the client's axios
// instance (`acme.axios`, its documented HTTP hook) gets interceptors that act only inside an
// issue() call of this issuer (AsyncLocalStorage), which also carry the `ca` trust per request.
import { AsyncLocalStorage } from 'node:async_hooks';
import { X509Certificate } from 'node:crypto';
import https from 'node:https';
import tls from 'node:tls';
import * as acme from 'acme-client';
import { IssueError, PROBLEM, problemKind } from './issue-error.ts';
import { certId, fetchRenewalInfo, renewalInfoUrl, retryAfterSeconds, type RenewalInfo } from './ari.ts';
import { settle, type LookTrace } from './acme-poll.ts';

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

// one ACME request; without it axios waits forever on a CA that accepted the connection
const REQUEST_TIMEOUT_MS = 30_000;

interface Problem {
  type: string;
  detail: string;
  retryAfterSeconds?: number;
}

/** What one issue() call saw on the wire. */
interface Trace extends LookTrace {
  agent: https.Agent;
  problem?: Problem;
}

export function createAcmeIssuer(options: AcmeIssuerOptions): AcmeIssuer {
  const { directoryUrl, email, accountKeys, challenges } = options;
  const backoffMin = options.backoffMin ?? 250;
  // one entry per certificate: OpenSSL reads only the first certificate of each entry
  const ca = options.ca === undefined ? undefined : [...tls.getCACertificates('default'), ...(options.ca.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [])];
  const traces = new AsyncLocalStorage<Trace>();
  let orderCount = 0;
  let account: Promise<acme.Client> | null = null;

  acme.axios.interceptors.request.use((config) => {
    const trace = traces.getStore();
    if (trace === undefined) return config;
    config.httpsAgent = trace.agent;
    config.timeout = REQUEST_TIMEOUT_MS;
    // acme-client retries 429, 5xx and transport errors itself, sleeping out Retry-After (hours
    // for a rate limit) inside issue() and holding the caller's lock; a spent attempt counter
    // turns that off, so a failure comes back at once and the caller's backoff decides.
    return Object.assign(config, { retryAttempt: Number.POSITIVE_INFINITY });
  });
  acme.axios.interceptors.response.use((response) => {
    const trace = traces.getStore();
    if (trace === undefined) return response;
    const data: unknown = response.data;
    trace.status = response.status;
    if (response.status === 201 && isObject(data) && typeof data.finalize === 'string') orderCount += 1;
    // badNonce is retried by acme-client itself (RFC 8555 §6.5): not the reason for a failure
    if (response.status >= 400 && isProblem(data) && data.type !== `${PROBLEM}badNonce`) {
      trace.problem = { type: data.type, detail: data.detail ?? '', retryAfterSeconds: retryAfterSeconds(response.headers['retry-after'], Date.now()) };
    } else if (isObject(data) && data.status === 'invalid') {
      // an invalid challenge or order carries the reason in `error`, an invalid authorisation in the
      // `error` of its failed challenge
      const error = isProblem(data.error) ? data.error : Array.isArray(data.challenges) ? data.challenges.map((c: unknown) => (isObject(c) ? c.error : undefined)).find(isProblem) : undefined;
      if (error !== undefined) trace.problem = { type: error.type, detail: error.detail ?? '' };
    }
    return response;
  });

  function newTrace(): Trace {
    const agent = new https.Agent({ keepAlive: true, ...(ca === undefined ? {} : { ca }) });
    const trace: Trace = { agent };
    // axios loses a transport error (refused, TLS verification) once retries are off: keep it here
    const createConnection = agent.createConnection.bind(agent);
    agent.createConnection = ((...args: Parameters<typeof createConnection>) => {
      const socket = createConnection(...args);
      socket?.once('error', (err: Error) => { trace.transportError ??= err; });
      return socket;
    }) as typeof agent.createConnection;
    return trace;
  }

  function classify(err: unknown, trace: Trace, doing: string): IssueError {
    if (err instanceof IssueError) return err;
    const { problem, transportError } = trace;
    if (problem !== undefined) {
      return new IssueError(problemKind(problem.type), `${doing}: ${problem.detail || problem.type}`, {
        problemType: problem.type, retryAfterSeconds: problem.retryAfterSeconds, cause: err,
      });
    }
    if (transportError !== undefined) {
      return new IssueError('ca', `${doing}: talking to ${directoryUrl}: ${transportError.message}`, { cause: transportError });
    }
    if (err instanceof TypeError && /reading 'config'/.test(err.message)) {
      // acme-client's retry path drops a request error that never reached a socket (a failed DNS lookup)
      return new IssueError('ca', `${doing}: could not reach the CA at ${directoryUrl}`, { cause: err });
    }
    return new IssueError('ca', `${doing}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }

  // The account key is made once and saved before the account is registered, so a crash in
  // between cannot orphan an account. Store failures are not CA errors: they propagate as they are.
  async function openAccount(): Promise<acme.Client> {
    let accountKey = await accountKeys.load();
    if (accountKey === null) {
      accountKey = (await acme.crypto.createPrivateEcdsaKey()).toString();
      await accountKeys.save(accountKey);
      // the first writer wins (Redis SET NX): use the key that was kept, not this one
      accountKey = (await accountKeys.load()) ?? accountKey;
    }
    const client = new acme.Client({ directoryUrl, accountKey, backoffMin, ...(options.eab ? { externalAccountBinding: options.eab } : {}) });
    const trace = newTrace();
    try {
      await traces.run(trace, async () => {
        // An account this key already has (a restart, another instance) is looked up first
        // (RFC 8555 §7.3.1 onlyReturnExisting): registering it again makes acme-client send the
        // registration's fields as an account update, which a CA refuses when they change nothing
        // ("use POST-as-GET", pebble) — with no contact e-mail, every time.
        try {
          await client.createAccount({ onlyReturnExisting: true });
          if (email !== null) await client.updateAccount({ contact: [`mailto:${email}`] });
          return;
        } catch (err) {
          if (trace.problem?.type !== `${PROBLEM}accountDoesNotExist`) throw err;
          delete trace.problem;
        }
        try {
          await client.createAccount({ termsOfServiceAgreed: true, ...(email === null ? {} : { contact: [`mailto:${email}`] }) });
        } catch (err) {
          // another instance registered this key in between: the CA answered with the existing
          // account (its URL is now known) and only acme-client's follow-up update failed
          if (!hasAccountUrl(client)) throw err;
          delete trace.problem;
        }
      });
    } catch (err) {
      throw classify(err, trace, 'registering the ACME account');
    } finally {
      trace.agent.destroy();
    }
    return client;
  }

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
    const opening = account ??= openAccount().catch((err: unknown) => { if (account === opening) account = null; throw err; });
    return opening;
  }

  // A CA may forget the account (pebble keeps accounts in memory; a CA may purge or deactivate
  // one): the cached client then fails every order with accountDoesNotExist. The account is
  // dropped so the next openAccount() looks it up or registers it again, and the order is tried
  // once more at once, so the caller does not wait out a backoff for the CA's amnesia.
  async function orderWithAccount(hostname: string, csr: Buffer, options: OrderOptions, placed: () => void, again = true): Promise<string> {
    const opened = currentAccount();
    const client = await opened;
    const trace = newTrace();
    try {
      return await traces.run(trace, () => order(client, trace, hostname, csr, options, placed));
    } catch (err) {
      if (!(err instanceof IssueError) && err instanceof Error && err.message.startsWith('storing the HTTP-01')) throw err;
      const failure = classify(err, trace, `ordering a certificate for ${hostname}`);
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
    const trace = newTrace();
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

/** the CA does not know the account the order was signed with (RFC 8555 §6.7 accountDoesNotExist) */
function accountUnknown(failure: IssueError): boolean {
  if (failure.problemType === `${PROBLEM}accountDoesNotExist`) return true;
  // some CAs answer an unknown key id with a generic problem: unauthorized/malformed naming the account
  return (failure.problemType === `${PROBLEM}unauthorized` || failure.problemType === `${PROBLEM}malformed`)
    && /\baccount\b.*\b(not found|does not exist|unknown)\b/i.test(failure.message);
}

function hasAccountUrl(client: acme.Client): boolean {
  try {
    return client.getAccountUrl() !== '';
  } catch {
    return false;
  }
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

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

function isProblem(value: unknown): value is { type: string; detail?: string } {
  return isObject(value) && typeof value.type === 'string';
}

/** A common name holds 64 characters (RFC 5280's ub-common-name; Let's Encrypt refuses a longer one as
 * a bad CSR), a hostname 253: a longer one is named by its SAN alone, which is what CAs go by. */
export function csrNames(hostname: string): { commonName?: string; altNames: string[] } {
  return hostname.length <= 64 ? { commonName: hostname, altNames: [hostname] } : { altNames: [hostname] };
}
