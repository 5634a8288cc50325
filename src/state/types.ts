// One store interface per noun, two backends each: embedded.ts (memory + durable append-only log,
// one process owns it) and redis.ts (shared by many instances). test/state/contract.test.ts runs the
// same cases against both.
//
// Contract for every store:
// - "not found" is `null`, never an exception;
// - a method resolves only once the write is durable (fsynced log / acknowledged by Redis);
// - backend failures reject with an Error whose `code` is 'STATE_UNAVAILABLE'.
import { createHash } from 'node:crypto';
import type { Plan } from '../config.ts';
import type { Limit } from '../ratelimit/limiter.ts';
import type { DomainEvent, EventsToWrite } from '../domains/events.ts';
import type { ScheduleStore } from './schedule.ts';

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
  /** every category of the environment in id order; do not modify the array (it may be shared) */
  list(environment: Environment): Promise<Category[]>;
  get(environment: Environment, id: number): Promise<Category | null>;
  /**
   * Assigns the next id (positive, below 2^53, never reused — also across restarts and instances)
   * and stores the category, atomically with the cap check. 'full' when `cap` categories exist.
   */
  create(environment: Environment, fields: Omit<Category, 'id'>, cap: number): Promise<Category | 'full'>;
  /**
   * create() under a client's idempotency key (the `Idempotency-Key` header), atomically with it: the
   * key's first use within IDEMPOTENCY_TTL_MS creates and remembers the category; a later use with the
   * same fields gets that category back (`replayed`) and creates nothing, with other fields
   * 'key_reused'. Nothing is remembered for 'full'.
   */
  createOnce(environment: Environment, fields: Omit<Category, 'id'>, cap: number, once: IdempotencyKey): Promise<Category | 'full' | 'key_reused' | { replayed: Category }>;
}

/** a client's idempotency key, which belongs to the account whose key sent it */
export interface IdempotencyKey {
  accountId: string;
  key: string;
}

/** how long an idempotency key is remembered after its first use */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;

/** where a remembered idempotency key is stored: a digest, so a client's bytes never name a key or a file */
export function idempotencyId(once: IdempotencyKey): string {
  return createHash('sha256').update(`${once.accountId}\n${once.key}`).digest('hex');
}

export interface Project {
  id: string;
  accountId: string;
  /** a DNS label; the project answers on `<name>.<platform domain>` */
  name: string;
  upstream: string | null;
  createdAt: string;
}

export type DomainStatus = 'pending' | 'verified' | 'failed';
export type RedirectStatus = 301 | 302 | 307 | 308;

export interface DnsRecord {
  type: string;
  name: string;
  value: string;
  ttl: number;
  note?: string;
}

export interface Diagnostic {
  code: string;
  message: string;
  found?: string[];
  expected?: string;
}

export interface CertificateState {
  /** queued: waiting for a CA limit (src/certs/order-queue.ts), in verification order */
  status: 'none' | 'queued' | 'pending' | 'issued' | 'failed';
  issuer?: string;
  notAfter?: string;
  lastError?: string;
  nextAttemptAt?: string;
  /** 1 = next in line behind a CA limit */
  queuePosition?: number;
  /** consecutive failed orders (internal: sets the backoff) */
  failures?: number;
  /** when a due renewal was first held back by misconfigured DNS (internal: the timeline says it once) */
  renewalPausedAt?: string;
}

export interface Hsts {
  maxAge: number;
  includeSubDomains?: boolean;
  preload?: boolean;
}

export interface Domain {
  hostname: string;
  projectId: string;
  accountId: string;
  primary: boolean;
  status: DomainStatus;
  /** the hostname is the registrable domain (ALIAS record instead of CNAME) */
  apex: boolean;
  records: DnsRecord[];
  diagnostics: Diagnostic[];
  certificate: CertificateState;
  hsts?: Hsts;
  /** set: the domain answers with a redirect instead of serving the project */
  redirect?: { to: string; status: RedirectStatus };
  /** set when the hostname belonged to another account within 30 days: TXT _portico.<hostname> */
  ownershipToken?: string;
  createdAt: string;
  verifiedAt?: string;
  /** a verified domain whose DNS stopped pointing at us (three failed checks in a row); absent: ok */
  health?: DomainHealth;
  /** the last and the next automatic DNS check (src/domains/rechecks.ts) */
  lastCheckedAt?: string;
  nextCheckAt?: string;
  /** internal: automatic checks since the cycle (re)started, and failed checks in a row */
  recheck?: { since: string; attempts: number; failuresInRow: number };
}

export type DomainHealth = 'ok' | 'misconfigured';

/** What the routing index keeps per hostname: small, so 100k domains stay cheap. */
export interface DomainRoute {
  projectId: string;
  redirect?: { to: string; status: RedirectStatus };
  hsts?: Hsts;
}

export interface ProjectStore {
  /** 'name_taken' when another project has this name */
  create(project: Project): Promise<'name_taken' | null>;
  get(id: string): Promise<Project | null>;
  list(): Promise<Project[]>;
  update(project: Project): Promise<Project | null>;
}

/**
 * Domains. Every write method takes an optional `event` (src/domains/events.ts; one, or an array
 * written in order): it is appended to the domain's timeline in the same atomic step as the change
 * it describes, or not at all (the domain was gone). The timeline keeps the newest
 * MAX_DOMAIN_EVENTS (200) events.
 */
export interface DomainStore {
  get(hostname: string): Promise<Domain | null>;
  listByProject(projectId: string): Promise<Domain[]>;
  /** each of the project's domains with its status, from the index: no domain record is read */
  statusesByProject(projectId: string): Promise<Array<{ hostname: string; status: DomainStatus }>>;
  /**
   * claims the hostname atomically; 'taken' when any project has it already. The timeline starts
   * with `event`; a timeline the same account left behind on removal (within 31 days) continues.
   */
  create(domain: Domain, event?: EventsToWrite): Promise<'taken' | null>;
  /** replaces the domain, except its `certificate` (see setCertificate); null when it is gone */
  update(domain: Domain, event?: EventsToWrite): Promise<Domain | null>;
  /**
   * The certificate state alone, kept apart from the rest of the domain so the certificate manager
   * and owner changes (redirects, primary, HSTS) never overwrite each other. No-op for an unknown domain,
   * and, given `of` (a domain's createdAt), for one removed and added back under the name meanwhile: the
   * check and the write are one step, so a certificate order's result never lands on the new domain.
   */
  setCertificate(hostname: string, certificate: CertificateState, event?: EventsToWrite, of?: string): Promise<void>;
  /** appends one event for a step that changes nothing else; no-op for an unknown domain (or another one, as setCertificate) */
  appendEvent(hostname: string, event: DomainEvent, of?: string): Promise<void>;
  /** the domain's timeline, oldest first; [] for an unknown domain */
  events(hostname: string): Promise<DomainEvent[]>;
  /**
   * removes it and remembers which account had it (takeover guard); null when unknown. The timeline,
   * ending with `event`, is kept with that memory for 31 days and continues if the same account adds
   * the hostname again; it is dropped when another account does. Embedded: a domain whose file
   * cannot be read (damaged, or deleted by hand) is removed from its index entry, its account taken
   * from its project; the whole domain is not known then, only what `RemovedDomain` names.
   */
  remove(hostname: string, at: string, event?: EventsToWrite): Promise<RemovedDomain | null>;
  /** the last account that had this hostname, and when it was removed */
  previousOwner(hostname: string): Promise<PreviousOwner | null>;
  /** the route of a served (verified) domain, read from the backend; null when it is not served */
  route(hostname: string): Promise<DomainRoute | null>;
  /**
   * The same, answered from this instance's routing index without I/O (DESIGN §8): what the request
   * pipeline and the SNI callback use. The index is loaded when the store opens, follows every change
   * this instance makes at once, and changes made by other instances on their change notice.
   */
  indexedRoute(hostname: string): DomainRoute | null;
  countByStatus(): Promise<Record<DomainStatus, number>>;
}

/**
 * Change notices between instances (Redis pub/sub; in-process when embedded). Topics:
 * `domain:<hostname>`, `project:<id>`, and `*` (everything may have changed: reload).
 */
export interface Events {
  publish(topic: string): Promise<void>;
  subscribe(handler: (topic: string) => void): void;
}

/** The route of a domain, or null when it is not served. */
export function routeOf(domain: Domain): DomainRoute | null {
  if (domain.status !== 'verified') return null;
  const route: DomainRoute = { projectId: domain.projectId };
  if (domain.redirect) route.redirect = domain.redirect;
  if (domain.hsts) route.hsts = domain.hsts;
  return route;
}

export interface Stores {
  accounts: AccountStore;
  keys: KeyStore;
  categories: CategoryStore;
  projects: ProjectStore;
  domains: DomainStore;
  events: Events;
  /** due times of background work: domain checks, queued orders, renewals (schedule.ts) */
  schedule: ScheduleStore;
  /** 'ok', or 'down' when the shared backend cannot be reached */
  health(): Promise<'ok' | 'down'>;
  close(): Promise<void>;
}

/** the account a hostname was last removed from, and when: whose claim the 30-day rule protects (DESIGN §5) */
export type PreviousOwner = { accountId: string; removedAt: string };

/** What a domain's removal leaves as its previous owner: its account, unless that account was asked to
 * prove ownership (the TXT record, since another account had the name) and never did; then the owner
 * it was asked to prove against stays. Otherwise removing and adding the name again skipped the TXT. */
export function ownerAfterRemoval(domain: Domain, at: string, earlier: PreviousOwner | null): PreviousOwner | null {
  const proven = domain.ownershipToken === undefined || domain.verifiedAt !== undefined;
  return proven ? { accountId: domain.accountId, removedAt: at } : earlier;
}

/** what a removal knows of the domain it removed; `primary` is true when that cannot be known */
export type RemovedDomain = Pick<Domain, 'hostname' | 'projectId' | 'accountId' | 'primary'>;

/** a stored history's previous owner (`owner` since removals keep an unproven claim's predecessor) */
export function ownerOf(history: PreviousOwner & { owner?: PreviousOwner | null }): PreviousOwner | null {
  return history.owner !== undefined ? history.owner : { accountId: history.accountId, removedAt: history.removedAt };
}

export function stateUnavailable(cause: unknown): Error {
  const error = new Error('state backend unavailable', { cause }) as Error & { code: string };
  error.code = 'STATE_UNAVAILABLE';
  return error;
}

/** Runs a command on a plain client: its failure is STATE_UNAVAILABLE (the stores' own path is redis-commands.ts) */
export async function unavailableOnError<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    throw stateUnavailable(err);
  }
}
