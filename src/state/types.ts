// One store interface per noun, two backends each: embedded.ts (memory + durable append-only log,
// one process owns it) and redis.ts (shared by many instances). test/state/contract.test.ts runs the
// same cases against both.
//
// Contract for every store:
// - "not found" is `null`, never an exception;
// - a method resolves only once the write is durable (fsynced log / acknowledged by Redis);
// - backend failures reject with an Error whose `code` is 'STATE_UNAVAILABLE'.
import type { Plan } from '../config.ts';
import type { Limit } from '../ratelimit/limiter.ts';

export type Environment = 'production' | 'staging';
export const ENVIRONMENTS: readonly Environment[] = ['production', 'staging'];

export interface Account {
  id: string;
  plan: Plan;
  /** only for the enterprise plan; other plans take their limits from configuration */
  limits?: Limit;
  createdAt: string;
}

export interface ApiKey {
  id: string;
  accountId: string;
  environment: Environment;
  /** hex SHA-256 of the key; the key itself is never stored */
  hash: string;
  createdAt: string;
  revokedAt?: string;
}

export interface Category {
  id: number;
  name: string;
  description?: string;
}

export interface AccountStore {
  create(account: Account): Promise<void>;
  get(id: string): Promise<Account | null>;
  /** replaces the account; null when there is none */
  update(account: Account): Promise<Account | null>;
}

export interface KeyStore {
  create(key: ApiKey): Promise<void>;
  get(id: string): Promise<ApiKey | null>;
  findByHash(hash: string): Promise<ApiKey | null>;
  /** marks the key revoked (idempotent) and drops it from every instance's cache; null when unknown */
  revoke(id: string, at: string): Promise<ApiKey | null>;
}

export interface CategoryStore {
  /** every category of the environment in id order */
  list(environment: Environment): Promise<Category[]>;
  get(environment: Environment, id: number): Promise<Category | null>;
  /**
   * Assigns the next id (positive, below 2^53, never reused — also across restarts and instances)
   * and stores the category, atomically with the cap check. 'full' when `cap` categories exist.
   */
  create(environment: Environment, fields: Omit<Category, 'id'>, cap: number): Promise<Category | 'full'>;
}

export interface Stores {
  accounts: AccountStore;
  keys: KeyStore;
  categories: CategoryStore;
  /** 'ok', or 'down' when the shared backend cannot be reached */
  health(): Promise<'ok' | 'down'>;
  close(): Promise<void>;
}

export function stateUnavailable(cause: unknown): Error {
  const error = new Error('state backend unavailable', { cause }) as Error & { code: string };
  error.code = 'STATE_UNAVAILABLE';
  return error;
}
