// Why an order failed, as the issuer chain and the queue branch on it, and which kind each ACME
// problem type is. Its own module so that they can name it without loading acme-client (and
// @peculiar/x509 behind it) at start: the ACME client is loaded with the first order (issuing.ts).
import { shortened } from '../domains/dns-answers.ts';

/**
 * the characters kept of an order's failure message. A CA's problem detail quotes what the validated
 * host answered (a body, a redirect target), so it is as untrusted as a DNS answer and is shown the
 * same way (dns-answers.ts): cut, saying how long it was, with control characters, line separators
 * and bidi marks written as escapes. One of 3077 characters with a newline and a U+202E went whole
 * into lastError, the timeline, the log and the dashboard. A real failure (the step, the URL the CA
 * fetched, the reason) fits.
 */
const SHOWN_ISSUE_ERROR_CHARS = 500;

export type IssueErrorKind = 'dns' | 'caa' | 'challenge' | 'rate_limit' | 'ca';

export class IssueError extends Error {
  kind: IssueErrorKind;
  /** from the CA's Retry-After, when it sent one */
  retryAfterSeconds?: number;
  /** the ACME problem type, when the CA sent a problem */
  problemType?: string;
  /** the CA created an order before it failed (it counts against the account's order limit) */
  ordered = false;

  constructor(kind: IssueErrorKind, message: string, details: { retryAfterSeconds?: number; problemType?: string; cause?: unknown } = {}) {
    super(shortened(message, SHOWN_ISSUE_ERROR_CHARS), { cause: details.cause });
    this.name = 'IssueError';
    this.kind = kind;
    if (details.retryAfterSeconds !== undefined) this.retryAfterSeconds = details.retryAfterSeconds;
    if (details.problemType !== undefined) this.problemType = details.problemType;
  }
}

/** ACME problem types (RFC 8555 §6.7) begin with this */
export const PROBLEM = 'urn:ietf:params:acme:error:';
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

/** The IssueError kind for an ACME problem type (RFC 8555 §6.7); unknown types are the CA's. */
export function problemKind(type: string): IssueErrorKind {
  return (type.startsWith(PROBLEM) ? KIND_BY_PROBLEM.get(type.slice(PROBLEM.length)) : undefined) ?? 'ca';
}
