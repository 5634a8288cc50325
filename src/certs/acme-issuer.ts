// The ACME issuer: one HTTP-01 order per issue() call (acme-client 5), for an ECDSA P-256 key.
// It does not decide *whether* to order (verification, locks, de-duplication, backoff are the
// caller's); it places the order and says, as an IssueError kind, why one failed.
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

export type IssueErrorKind = 'dns' | 'caa' | 'challenge' | 'rate_limit' | 'ca';

export class IssueError extends Error {
  kind: IssueErrorKind;
  /** from the CA's Retry-After, when it sent one */
  retryAfterSeconds?: number;
  /** the ACME problem type, when the CA sent a problem */
  problemType?: string;

  constructor(kind: IssueErrorKind, message: string, details: { retryAfterSeconds?: number; problemType?: string; cause?: unknown } = {}) {
    super(message, { cause: details.cause });
    this.name = 'IssueError';
    this.kind = kind;
    if (details.retryAfterSeconds !== undefined) this.retryAfterSeconds = details.retryAfterSeconds;
    if (details.problemType !== undefined) this.problemType = details.problemType;
  }
}

export interface AcmeIssuerOptions {
  directoryUrl: string;
  email: string | null;
  accountKeys: AccountKeyStore;
  challenges: ChallengeStore;
  /** PEM of a CA to trust for the directory's HTTPS, on top of the default store (pebble in tests) */
  ca?: string;
  /** first poll delay (ms) while the CA validates and finalises; doubles up to 30 s */
  backoffMin?: number;
}

export interface AcmeIssuer {
  issue(hostname: string): Promise<IssuedCertificate>;
  /** orders the CA created for this issuer since it was made */
  orders(): number;
}

const PROBLEM = 'urn:ietf:params:acme:error:';
const KIND_BY_PROBLEM = new Map<string, IssueErrorKind>([
  ['dns', 'dns'],
  ['caa', 'caa'],
  // the CA could not reach or did not like the HTTP-01 answer (pebble: an unresolvable name too)
  ['connection', 'challenge'],
  ['unauthorized', 'challenge'],
  ['incorrectResponse', 'challenge'],
  ['tls', 'challenge'],
  ['rateLimited', 'rate_limit'],
]);
// one ACME request; without it axios waits forever on a CA that accepted the connection
const REQUEST_TIMEOUT_MS = 30_000;

interface Problem {
  type: string;
  detail: string;
  retryAfterSeconds?: number;
}

/** What one issue() call saw on the wire. */
interface Trace {
  agent: https.Agent;
  problem?: Problem;
  transportError?: Error;
}

export function createAcmeIssuer(options: AcmeIssuerOptions): AcmeIssuer {
  const { directoryUrl, email, accountKeys, challenges } = options;
  const backoffMin = options.backoffMin ?? 250;
  const ca = options.ca === undefined ? undefined : [...tls.getCACertificates('default'), options.ca];
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
    if (response.status === 201 && isObject(data) && typeof data.finalize === 'string') orderCount += 1;
    // badNonce is retried by acme-client itself (RFC 8555 §6.5): not the reason for a failure
    if (response.status >= 400 && isProblem(data) && data.type !== `${PROBLEM}badNonce`) {
      trace.problem = { type: data.type, detail: data.detail ?? '', retryAfterSeconds: parseRetryAfter(response.headers['retry-after']) };
    } else if (isObject(data) && data.status === 'invalid' && isProblem(data.error)) {
      // an invalid challenge, authorisation or order carries the reason in `error`
      trace.problem = { type: data.error.type, detail: data.error.detail ?? '' };
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
    }
    const client = new acme.Client({ directoryUrl, accountKey, backoffMin });
    const trace = newTrace();
    try {
      await traces.run(trace, () => client.createAccount({
        termsOfServiceAgreed: true,
        ...(email === null ? {} : { contact: [`mailto:${email}`] }),
      }));
    } catch (err) {
      throw classify(err, trace, 'registering the ACME account');
    } finally {
      trace.agent.destroy();
    }
    return client;
  }

  async function issue(hostname: string): Promise<IssuedCertificate> {
    account ??= openAccount().catch((err: unknown) => { account = null; throw err; });
    const client = await account;
    const [keyPem, csr] = await acme.crypto.createCsr({ commonName: hostname, altNames: [hostname] }, await acme.crypto.createPrivateEcdsaKey('P-256'));
    const trace = newTrace();
    let storeFailure: unknown;
    let certPem: string;
    try {
      certPem = await traces.run(trace, () => client.auto({
        csr,
        email: email ?? undefined,
        termsOfServiceAgreed: true,
        challengePriority: ['http-01'],
        // the client's own pre-check would resolve the name with the system resolver, which
        // need not be the one the CA uses; the CA's validation is the one that counts
        skipChallengeVerification: true,
        challengeCreateFn: async (_authz, challenge, keyAuthorization) => {
          try {
            await challenges.set(challenge.token, keyAuthorization);
          } catch (err) {
            storeFailure = err;
            throw err;
          }
        },
        challengeRemoveFn: (_authz, challenge) => challenges.remove(challenge.token),
      }));
    } catch (err) {
      if (storeFailure !== undefined) throw new Error(`storing the HTTP-01 challenge for ${hostname}`, { cause: storeFailure });
      throw classify(err, trace, `ordering a certificate for ${hostname}`);
    } finally {
      trace.agent.destroy();
    }
    return describe(certPem, keyPem.toString());
  }

  return { issue, orders: () => orderCount };
}

/** The IssueError kind for an ACME problem type (RFC 8555 §6.7); unknown types are the CA's. */
export function problemKind(type: string): IssueErrorKind {
  return (type.startsWith(PROBLEM) ? KIND_BY_PROBLEM.get(type.slice(PROBLEM.length)) : undefined) ?? 'ca';
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

/** Retry-After is delay-seconds or an HTTP-date (RFC 9110 §10.2.3). */
function parseRetryAfter(header: unknown): number | undefined {
  if (typeof header !== 'string' || header === '') return undefined;
  if (/^\d+$/.test(header)) return Number(header);
  const at = Date.parse(header);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}
