// One certificate from the first issuer that can give it (DESIGN §6). For each issuer, in order:
// 1. CAA at the hostname (RFC 8659) must allow this CA, else the next (the CA would refuse);
// 2. the limits Portico keeps for it must have room (ca-limits.ts), else the next — and when no
//    issuer has room, the order waits in the queue until the earliest one does;
// 3. the order: issued → done; refused or not completed (unreachable, rejectedIdentifier, rate
//    limit, a failed validation) → the next. What the CA did not count is given back to the budget.
// Every order placed and every failure is told to `record` as it happens, for the domain's timeline.
import type { DomainEvent } from '../domains/events.ts';
import { domainEvent } from '../domains/events.ts';
import type { AcmeIssuer, IssuedCertificate } from './acme-issuer.ts';
import { IssueError } from './issue-error.ts';
import { orderRequests, settleRequests, type CaLimitStore, type LimitName } from './ca-limits.ts';
import type { IssuerSettings } from './issuers.ts';

export interface ChainOptions {
  issuers: readonly IssuerSettings[];
  /** the ACME client for an issuer (made on first use) */
  open(issuer: IssuerSettings): Promise<AcmeIssuer>;
  limits: CaLimitStore;
  /** does CAA at the hostname allow this issuer (its identities, its account)? (a DNS failure: let the CA decide) */
  caaAllows(hostname: string, issuer: IssuerSettings): Promise<boolean>;
  now?: () => number;
}

export type ChainOutcome =
  | { kind: 'issued'; issued: IssuedCertificate; issuer: IssuerSettings }
  /** every issuer CAA allows is over a limit: wait until retryAt (refillMs: the wait per place in line) */
  | { kind: 'limited'; issuer: IssuerSettings; limit: LimitName; retryAt: number; refillMs: number }
  | { kind: 'failed'; error: IssueError };

export interface IssueRequest {
  hostname: string;
  /** ARI (RFC 9773 §5): the certificate being replaced, named at the CA that issued it */
  replaces?: { certId: string; directory: string };
  record(event: DomainEvent): Promise<void>;
}

const LIMIT_WORDS: Record<LimitName, string> = {
  new_orders: 'new orders per account',
  certs_per_domain: 'certificates per registered domain',
  failed_validations: 'failed validations for this hostname',
};

export function describeLimit(limit: LimitName): string {
  return LIMIT_WORDS[limit];
}

const VALIDATION_KINDS = new Set(['dns', 'caa', 'challenge']);

export function createIssuerChain(options: ChainOptions) {
  const now = options.now ?? Date.now;

  async function issue({ hostname, replaces, record }: IssueRequest): Promise<ChainOutcome> {
    let limited: Extract<ChainOutcome, { kind: 'limited' }> | null = null;
    let lastError: IssueError | null = null;
    for (const issuer of options.issuers) {
      const from = { issuer: issuer.name, directory: issuer.directory };
      // 1. CAA
      if (!(await options.caaAllows(hostname, issuer))) {
        lastError = new IssueError('caa', `CAA records for ${hostname} do not allow ${issuer.name} (${issuer.caa.join(', ') || 'no CAA identity configured'})`);
        await record(domainEvent('order_failed', `${issuer.name} may not issue for ${hostname}: its CAA records do not name ${issuer.caa[0] ?? 'this CA'}.`, { ...from, kind: 'caa' }, now()));
        continue;
      }
      // 2. limits
      const taken = await options.limits.take(issuer.id, orderRequests(issuer, hostname), now());
      if (!taken.ok) {
        if (limited === null || taken.retryAt < limited.retryAt) limited = { kind: 'limited', issuer, limit: taken.limit, retryAt: taken.retryAt, refillMs: taken.refillMs };
        continue;
      }
      // 3. the order
      let ordered = false;
      try {
        const acme = await options.open(issuer);
        const issued = await acme.issue(hostname, {
          ...(replaces && replaces.directory === issuer.directory ? { replaces: replaces.certId } : {}),
          onOrderPlaced: (url) => {
            ordered = true;
            void record(domainEvent('order_placed', `Ordered a certificate from ${issuer.name}.`, { ...from, order: url }, now())).catch(() => undefined);
          },
          onChallengeValid: () => {
            void record(domainEvent('challenge_served', `${issuer.name} fetched the HTTP-01 challenge from Portico and accepted it.`, from, now())).catch(() => undefined);
          },
          onRetry: (error) => {
            void record(domainEvent('order_failed', `${issuer.name} no longer knows Portico's ACME account (${error.message.replace(/[.!?]$/, '')}): registering it again and ordering once more.`, {
              ...from, kind: error.kind, ...(error.problemType ? { problemType: error.problemType } : {}), retrying: true,
            }, now())).catch(() => undefined);
          },
        });
        return { kind: 'issued', issued, issuer };
      } catch (err) {
        const error = err instanceof IssueError ? err : null;
        const failedValidation = error !== null && error.ordered && VALIDATION_KINDS.has(error.kind);
        await options.limits.take(issuer.id, settleRequests(issuer, hostname, { ordered: ordered || (error?.ordered ?? false), issued: false, failedValidation }), now()).catch(() => undefined);
        // a failure of Portico's own storage is not the CA's: no other CA would fare better
        if (error === null) throw err;
        lastError = error;
        const next = options.issuers[options.issuers.indexOf(issuer) + 1];
        const said = /[.!?]$/.test(error.message) ? error.message : `${error.message}.`;
        await record(domainEvent('order_failed', `${issuer.name} could not issue: ${said}${next ? ` Trying ${next.name} next.` : ''}`, {
          ...from, kind: error.kind, ...(error.problemType ? { problemType: error.problemType } : {}),
        }, now())).catch(() => undefined);
      }
    }
    // waiting for a limit beats a certain failure: the limited issuer will take it
    if (limited !== null) return limited;
    return { kind: 'failed', error: lastError ?? new IssueError('ca', 'no ACME issuer is configured') };
  }

  return {
    issue,
    /** the issuers' directories, in order */
    directories: options.issuers.map((issuer) => issuer.directory),
  };
}

export type IssuerChain = ReturnType<typeof createIssuerChain>;
