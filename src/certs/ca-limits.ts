// The CA limits Portico keeps for itself (DESIGN §6), as token buckets that refill continuously, the
// way Let's Encrypt's own limits do (https://letsencrypt.org/docs/rate-limits/): a bucket holds up
// to `capacity` tokens and regains capacity/period per millisecond. Two backends share this file's
// arithmetic: ca-limits-file.ts (embedded, durable) and ca-limits-redis.ts (one Lua script).
import { publicSuffixList } from '../domains/hostname-rules.ts';
import type { CaLimits, IssuerSettings } from './issuers.ts';

export type LimitName = 'new_orders' | 'certs_per_domain' | 'failed_validations';

export interface BucketRequest {
  limit: LimitName;
  /** the bucket within the issuer: '' (account), the registered domain, or the hostname */
  key: string;
  capacity: number;
  periodMs: number;
  /** tokens that must be there for the request to pass (0: none needed) */
  need: number;
  /** tokens taken when every request passes (negative: given back, up to capacity) */
  take: number;
}

export interface BucketState {
  tokens: number;
  /** ms since the epoch when `tokens` was true */
  at: number;
}

export type TakeResult = { ok: true } | { ok: false; limit: LimitName; retryAt: number; refillMs: number };

/**
 * The limits store. take() is atomic across every request of one issuer and every instance: all
 * are taken, or none. Buckets nobody used are full.
 */
export interface CaLimitStore {
  take(issuerId: string, requests: BucketRequest[], now: number): Promise<TakeResult>;
  /** tokens left per request (for metrics), without taking any */
  peek(issuerId: string, requests: BucketRequest[], now: number): Promise<number[]>;
  close?(): Promise<void>;
}

export function bucketKey(request: Pick<BucketRequest, 'limit' | 'key'>): string {
  return `${request.limit}:${request.key}`;
}

export function tokensAt(state: BucketState | undefined, request: BucketRequest, now: number): number {
  if (state === undefined) return request.capacity;
  const refilled = state.tokens + (Math.max(0, now - state.at) * request.capacity) / request.periodMs;
  return Math.min(request.capacity, refilled);
}

/** The arithmetic of take(): new states when every request passes, else the earliest retry. */
export function applyTake(states: Array<BucketState | undefined>, requests: BucketRequest[], now: number): { result: TakeResult; next: BucketState[] } {
  const tokens = requests.map((r, i) => tokensAt(states[i], r, now));
  let blocked: { limit: LimitName; retryAt: number; refillMs: number } | null = null;
  requests.forEach((r, i) => {
    if (tokens[i] >= r.need) return;
    const refillMs = r.periodMs / r.capacity;
    const retryAt = now + Math.ceil((r.need - tokens[i]) * refillMs);
    if (blocked === null || retryAt > blocked.retryAt) blocked = { limit: r.limit, retryAt, refillMs };
  });
  if (blocked !== null) return { result: { ok: false, ...(blocked as { limit: LimitName; retryAt: number; refillMs: number }) }, next: [] };
  const next = requests.map((r, i) => ({ tokens: Math.max(0, Math.min(r.capacity, tokens[i] - r.take)), at: now }));
  return { result: { ok: true }, next };
}

const HOUR = 3_600_000;
const PERIOD_MS: Record<LimitName, number> = { new_orders: 3 * HOUR, certs_per_domain: 7 * 24 * HOUR, failed_validations: HOUR };
const SETTING: Record<LimitName, keyof CaLimits> = { new_orders: 'newOrdersPer3h', certs_per_domain: 'certsPerDomainPerWeek', failed_validations: 'failedValidationsPerHour' };

function bucket(issuer: IssuerSettings, limit: LimitName, key: string, need: number, take: number): BucketRequest[] {
  const capacity = issuer.limits[SETTING[limit]];
  return capacity === null ? [] : [{ limit, key, capacity, periodMs: PERIOD_MS[limit], need, take }];
}

/** The registered domain the CA counts certificates under (Public Suffix List; unknown TLDs: the last two labels). */
export function registeredDomain(hostname: string): string {
  return publicSuffixList().getDomain(hostname, { allowPrivateDomains: false }) ?? hostname;
}

/** Before an order: one new order, one certificate for the registered domain, and no spent failed-validation budget. */
export function orderRequests(issuer: IssuerSettings, hostname: string): BucketRequest[] {
  return [
    ...bucket(issuer, 'new_orders', '', 1, 1),
    ...bucket(issuer, 'certs_per_domain', registeredDomain(hostname), 1, 1),
    ...bucket(issuer, 'failed_validations', hostname, 1, 0),
  ];
}

/** After an order: give back what the CA did not count (no order made, no certificate issued); count a failed validation. */
export function settleRequests(issuer: IssuerSettings, hostname: string, outcome: { ordered: boolean; issued: boolean; failedValidation: boolean }): BucketRequest[] {
  return [
    ...(outcome.ordered ? [] : bucket(issuer, 'new_orders', '', 0, -1)),
    ...(outcome.issued ? [] : bucket(issuer, 'certs_per_domain', registeredDomain(hostname), 0, -1)),
    ...(outcome.failedValidation ? bucket(issuer, 'failed_validations', hostname, 0, 1) : []),
  ];
}

/** The account-wide bucket, for the remaining-budget gauge. */
export function accountRequests(issuer: IssuerSettings): BucketRequest[] {
  return bucket(issuer, 'new_orders', '', 0, 0);
}
