// Admin calls for accounts and keys (DESIGN §5).
import { randomBytes } from 'node:crypto';
import { PLANS, type Config, type Plan } from '../config.ts';
import { HttpError } from '../errors.ts';
import { generateKey } from '../api/auth.ts';
import { limitFor } from '../api/plans.ts';
import type { Limit } from '../ratelimit/limiter.ts';
import { ENVIRONMENTS, type Account, type Environment, type Stores } from '../state/types.ts';
import { listed } from '../domains/dns-answers.ts';
import { shown } from './input.ts';

/** the characters quoted from one unknown field's name */
const SHOWN_FIELD_CHARS = 40;

export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString('base64url')}`;
}

export function accountView(account: Account, config: Config) {
  return { id: account.id, plan: account.plan, limits: limitFor(account, config), createdAt: account.createdAt };
}

export async function createAccount(body: Record<string, unknown>, stores: Stores, config: Config) {
  onlyKeys(body, ['plan', 'limits']);
  const plan = parsePlan(body.plan, true)!;
  const limits = body.limits === undefined ? undefined : parseLimits(body.limits);
  const account: Account = { id: newId('acc'), plan, createdAt: new Date().toISOString() };
  assignLimits(account, limits);
  await stores.accounts.create(account);
  return accountView(account, config);
}

export async function updateAccount(id: string, body: Record<string, unknown>, stores: Stores, config: Config) {
  onlyKeys(body, ['plan', 'limits']);
  const current = await stores.accounts.get(id);
  if (!current) throw new HttpError('not_found', `No account ${shown(id)}.`);
  const plan = parsePlan(body.plan, false) ?? current.plan;
  const limits = body.limits === undefined ? (plan === 'enterprise' ? current.limits : undefined) : parseLimits(body.limits);
  const account: Account = { id: current.id, plan, createdAt: current.createdAt };
  assignLimits(account, limits);
  const updated = await stores.accounts.update(account);
  if (!updated) throw new HttpError('not_found', `No account ${shown(id)}.`);
  return accountView(updated, config);
}

export async function createKey(body: Record<string, unknown>, stores: Stores) {
  onlyKeys(body, ['accountId', 'environment']);
  if (typeof body.accountId !== 'string' || body.accountId === '') throw new HttpError('invalid_request', '"accountId" is required and must be a string.');
  const environment = (body.environment === undefined ? 'production' : body.environment) as Environment;
  if (!ENVIRONMENTS.includes(environment)) throw new HttpError('invalid_request', `"environment" must be one of ${ENVIRONMENTS.join(', ')}.`);
  const account = await stores.accounts.get(body.accountId);
  if (!account) throw new HttpError('not_found', `No account ${shown(body.accountId)}.`);
  const { key, hash } = generateKey(environment);
  const id = newId('key');
  await stores.keys.create({ id, accountId: account.id, environment, hash, createdAt: new Date().toISOString() });
  return { id, key, accountId: account.id, environment };
}

export async function revokeKey(id: string, stores: Stores): Promise<void> {
  const revoked = await stores.keys.revoke(id, new Date().toISOString());
  if (!revoked) throw new HttpError('not_found', `No key ${shown(id)}.`);
}

export function onlyKeys(body: Record<string, unknown>, allowed: string[]): void {
  const unknown = Object.keys(body).filter((k) => !allowed.includes(k));
  if (unknown.length === 0) return;
  // names are the caller's: quoted printable, each cut short, the first few of them
  const names = listed(unknown, SHOWN_FIELD_CHARS, true);
  if (allowed.length === 0) throw new HttpError('invalid_request', `This call takes no fields: send no body, or {}; got ${names}.`);
  throw new HttpError('invalid_request', `Unknown field${unknown.length > 1 ? 's' : ''} ${names}; allowed: ${allowed.join(', ')}.`);
}

function parsePlan(value: unknown, required: boolean): Plan | null {
  if (value === undefined && !required) return null;
  if (typeof value !== 'string' || !PLANS.includes(value as Plan)) {
    throw new HttpError('invalid_request', `"plan" must be one of ${PLANS.join(', ')}.`);
  }
  return value as Plan;
}

function parseLimits(value: unknown): Limit {
  const isCount = (n: unknown): n is number => typeof n === 'number' && Number.isSafeInteger(n) && n > 0;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new HttpError('invalid_request', '"limits" must be an object {perMinute, perDay}.');
  const limits = value as Record<string, unknown>;
  const extra = Object.keys(limits).filter((k) => k !== 'perMinute' && k !== 'perDay');
  if (extra.length > 0) throw new HttpError('invalid_request', `Unknown field "limits.${shown(extra[0], SHOWN_FIELD_CHARS)}"; allowed: perMinute, perDay.`);
  if (!isCount(limits.perMinute) || !isCount(limits.perDay)) throw new HttpError('invalid_request', '"limits.perMinute" and "limits.perDay" must be positive integers.');
  return { perMinute: limits.perMinute, perDay: limits.perDay };
}

function assignLimits(account: Account, limits: Limit | undefined): void {
  if (account.plan === 'enterprise') {
    if (!limits) throw new HttpError('invalid_request', 'The enterprise plan needs "limits": {perMinute, perDay}.');
    account.limits = limits;
  } else if (limits) {
    throw new HttpError('invalid_request', `"limits" apply to the enterprise plan only; the ${account.plan} plan has fixed limits.`);
  }
}
