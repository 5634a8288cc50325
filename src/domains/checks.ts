// What one DNS check does to a domain (DESIGN §6, "Domains look after themselves"), as a pure
// function of the domain, the verifier's findings and the time: the next state, the events that
// describe the step, and when to check again. The owner's Verify / Re-verify (registry.ts) and the
// automatic checks (rechecks.ts) both go through it, so they cannot disagree.
//
// - pending (or failed on a finding): checked again after pendingRecheckMs, the wait doubling after
//   each automatic check up to 6 h; records found → verified; 30 days without → failed with
//   `verification_expired`, and the checks stop until Re-verify starts the cycle again;
// - verified: checked every verifiedRecheckMs; three failed checks in a row → health misconfigured
//   (still verified and served: removal is the owner's decision), the next passing check → ok. A
//   check that could not find out (only `dns_error`: SERVFAIL, a timeout) is neither a failure nor a
//   pass: an outage of our own resolvers must not mark every verified domain misconfigured.
// Every check is an event, except a routine one that finds a healthy domain unchanged, one that finds
// a pending or misconfigured domain failing as before (same diagnostics), and a check that could not
// be made right after another that could not (one event per outage, not one a check).
import type { Domain } from '../state/types.ts';
import { domainEvent, type DomainEvent } from './events.ts';
import type { Verification } from './verifier.ts';

export const MAX_PENDING_WAIT_MS = 6 * 3_600_000;
export const PENDING_EXPIRY_MS = 30 * 86_400_000;
export const MISCONFIGURED_AFTER = 3;

export type CheckReason = 'verify' | 'reverify' | 'recheck';

export interface CheckSettings {
  pendingRecheckMs: number;
  verifiedRecheckMs: number;
}

export interface CheckOutcome {
  domain: Domain;
  events: DomainEvent[];
  /** pending or failed before, verified now: certificates start */
  verifiedNow: boolean;
  /** when to check again (ms), null: no more automatic checks */
  nextCheckAt: number | null;
}

/** Whether the automatic checks have stopped for good (until Re-verify). */
export const checksStopped = (domain: Domain) => domain.status === 'failed' && domain.diagnostics.some((d) => d.code === 'verification_expired');

/** the wait after `attempts` automatic checks of a pending domain */
export function pendingWait(attempts: number, pendingRecheckMs: number): number {
  return Math.min(pendingRecheckMs * 2 ** Math.min(attempts, 30), MAX_PENDING_WAIT_MS);
}

export function applyCheck(current: Domain, result: Verification, reason: CheckReason, settings: CheckSettings, now: number): CheckOutcome {
  const at = new Date(now).toISOString();
  const fresh = reason === 'reverify' || !current.recheck;
  const recheck = fresh ? { since: reason === 'reverify' ? at : current.createdAt, attempts: 0, failuresInRow: 0 } : { ...current.recheck! };
  const found = summarise(result);
  const next: Domain = { ...current, diagnostics: result.diagnostics, lastCheckedAt: at, recheck };
  // a routine check that finds a healthy domain as it was is not news: it moves lastCheckedAt only, so
  // the newest 200 events keep the domain's history instead of a year of "still fine"
  const unknown = checkResult(result) === 'error';
  const unknownBefore = couldNotFindOut(current.diagnostics);
  // nor one that finds a misconfigured or pending domain failing exactly as it did: one event for each
  // thing that changes, not one a check (a domain misconfigured for months kept its last 200 events
  // saying the same)
  const sameFailure = reason === 'recheck' && !result.verified && !unknown && (current.status === 'pending' || current.health === 'misconfigured') && sameDiagnostics(current.diagnostics, result.diagnostics);
  const routine = sameFailure || (reason === 'recheck' && current.status === 'verified'
    ? (result.verified && current.health !== 'misconfigured' && (current.recheck?.failuresInRow ?? 0) === 0 && !unknownBefore) || (unknown && unknownBefore)
    : false);
  const events: DomainEvent[] = routine ? [] : [domainEvent('dns_checked', describeCheck(current, result, reason), found, now)];

  if (current.status === 'verified') {
    next.health ??= 'ok';
    if (unknown) {
      // could not find out: health and the count of failed checks stay as they were
    } else if (result.verified) {
      recheck.failuresInRow = 0;
      if (current.health === 'misconfigured') {
        next.health = 'ok';
        events.push(domainEvent('recovered', `DNS points at the platform again: the domain is healthy, and ${hasCertificate(current) ? 'certificate renewals resume' : 'ordering its certificate resumes'}.`, undefined, now));
      }
    } else {
      recheck.failuresInRow += 1;
      if (recheck.failuresInRow >= MISCONFIGURED_AFTER && current.health !== 'misconfigured') {
        next.health = 'misconfigured';
        events.push(domainEvent('misconfigured', describeMisconfigured(current, result, recheck.failuresInRow, now), found, now));
      }
    }
    return done(next, events, false, now + settings.verifiedRecheckMs);
  }

  if (result.verified) {
    next.status = 'verified';
    next.verifiedAt ??= at;
    next.health = 'ok';
    next.recheck = { since: at, attempts: 0, failuresInRow: 0 };
    events.push(domainEvent('verified', 'DNS points at the platform: the domain is verified and a certificate is being requested.', undefined, now));
    return done(next, events, true, now + settings.verifiedRecheckMs);
  }

  if (reason === 'recheck') recheck.attempts += 1;
  if (now - Date.parse(recheck.since) >= PENDING_EXPIRY_MS) {
    next.status = 'failed';
    next.diagnostics = [...result.diagnostics, { code: 'verification_expired', message: 'The DNS records did not appear within 30 days, so automatic checks have stopped. Create the records shown, then press Re-verify to start again.' }];
    events.push(domainEvent('verification_failed', 'Verification expired: the records did not appear within 30 days. Automatic checks have stopped; Re-verify starts them again.', found, now));
    return done(next, events, false, null);
  }
  // a finding that cannot be propagation (a wrong CNAME, CAA) fails the domain; checks go on all the same
  next.status = result.pending ? 'pending' : 'failed';
  if (next.status === 'failed' && current.status !== 'failed') {
    events.push(domainEvent('verification_failed', `Verification failed: ${result.diagnostics.map((d) => d.message).join(' ')} Checks continue automatically; fix the records and the domain verifies by itself.`, found, now));
  }
  return done(next, events, false, now + pendingWait(recheck.attempts, settings.pendingRecheckMs));
}

function done(domain: Domain, events: DomainEvent[], verifiedNow: boolean, nextCheckAt: number | null): CheckOutcome {
  if (nextCheckAt === null) delete domain.nextCheckAt;
  else domain.nextCheckAt = new Date(nextCheckAt).toISOString();
  return { domain, events, verifiedNow, nextCheckAt };
}

function summarise(result: Verification): Record<string, unknown> {
  if (result.verified) return { result: 'pass' };
  return { result: checkResult(result), diagnostics: result.diagnostics.map((d) => ({ code: d.code, ...(d.found ? { found: d.found } : {}), ...(d.expected ? { expected: d.expected } : {}) })) };
}

/** the metric's label: pass, fail (a record missing or wrong) or error (DNS did not answer) */
export function checkResult(result: Verification): 'pass' | 'fail' | 'error' {
  if (result.verified) return 'pass';
  return result.diagnostics.every((d) => d.code === 'dns_error') ? 'error' : 'fail';
}

/** every finding is `dns_error`: the check could not find out (usually temporary), it found nothing wrong */
function sameDiagnostics(a: Domain['diagnostics'], b: Domain['diagnostics']): boolean {
  return a.length > 0 && a.length === b.length && a.every((d, i) => d.code === b[i].code && d.message === b[i].message);
}

function couldNotFindOut(diagnostics: Domain['diagnostics']): boolean {
  return diagnostics.length > 0 && diagnostics.every((d) => d.code === 'dns_error');
}

// the findings that say DNS does not lead to the platform (CAA, say, is another matter)
const NOT_POINTING = new Set(['cname_missing', 'cname_mismatch', 'a_record_conflict', 'apex_address_mismatch']);

/** the domain has had a certificate issued (it may have expired since, and an order for the next one may have failed) */
const hasCertificate = (domain: Domain) => domain.certificate.status === 'issued' || domain.certificate.notAfter !== undefined;

// what the owner needs to know when a domain turns misconfigured: which checks failed, and what
// becomes of its certificate, which differs with whether it has one (ordering.ts pauses orders)
function describeMisconfigured(current: Domain, result: Verification, failures: number, now: number): string {
  const lead = result.diagnostics.some((d) => NOT_POINTING.has(d.code))
    ? `DNS has not pointed at the platform for ${failures} checks in a row.`
    : `${failures} DNS checks in a row found a problem.`;
  const { notAfter } = current.certificate;
  let certificate: string;
  if (!hasCertificate(current)) {
    certificate = 'The domain has no certificate yet, and none is ordered until DNS is fixed (the certificate authority\'s check would fail).';
  } else if (notAfter === undefined || Date.parse(notAfter) > now) {
    const until = notAfter === undefined ? '' : `, valid until ${notAfter}`;
    certificate = `The domain is still served with its current certificate${until}, but renewals are paused until DNS is fixed; if it is not fixed before then, the certificate expires.`;
  } else {
    certificate = `The domain's certificate expired on ${notAfter}, and no new one is ordered until DNS is fixed.`;
  }
  return `${lead} ${certificate} What the last check found: ${result.diagnostics.map((d) => d.message).join(' ')}`;
}

function describeCheck(current: Domain, result: Verification, reason: CheckReason): string {
  const who = reason === 'recheck' ? 'Automatic DNS check' : reason === 'verify' ? 'DNS check (Verify)' : 'DNS check (Re-verify)';
  if (result.verified) return `${who}: the records point at the platform.`;
  const what = result.diagnostics.map((d) => d.message).join(' ');
  if (current.status === 'verified' && couldNotFindOut(result.diagnostics)) {
    return `${who} could not be made: ${what} The domain stays ${current.health ?? 'ok'} and is checked again as usual; until DNS answers, no further event is written.`;
  }
  if (current.status === 'verified') return `${who} failed: ${what}`;
  return result.pending ? `${who}: not ready yet. ${what}` : `${who} found a problem: ${what}`;
}
