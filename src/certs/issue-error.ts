// Why an order failed, as the issuer chain and the queue branch on it. Its own module so that they can
// name it without loading acme-client (and @peculiar/x509 behind it) at start: the ACME client is loaded
// with the first order (issuing.ts).
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
    super(message, { cause: details.cause });
    this.name = 'IssueError';
    this.kind = kind;
    if (details.retryAfterSeconds !== undefined) this.retryAfterSeconds = details.retryAfterSeconds;
    if (details.problemType !== undefined) this.problemType = details.problemType;
  }
}
