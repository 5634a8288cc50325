// The ACME issuers Portico orders from, in order of preference (DESIGN §2, §6): which directories,
// the External Account Binding some CAs want (RFC 8555 §7.3.4: ZeroSSL, Google Trust Services), the
// CAA identities that let each one issue (RFC 8659 §4.2), and the limits Portico keeps for each so
// the CA never has to refuse an order.
import { createHash } from 'node:crypto';
import type { Config } from '../config.ts';
import type { Reader } from '../config-reader.ts';

/** Token buckets per issuer (null: no limit kept). Each refills continuously, as Let's Encrypt's do. */
export interface CaLimits {
  /** new orders per ACME account per rolling 3 h */
  newOrdersPer3h: number | null;
  /** certificates per registered domain per rolling 7 days */
  certsPerDomainPerWeek: number | null;
  /** failed validations per account and hostname per rolling hour */
  failedValidationsPerHour: number | null;
}

export interface IssuerSettings {
  /** what logs, events and metrics call it: the configured name, else the directory's host */
  name: string;
  directory: string;
  /** a short stable key for stores (a hash of the directory URL) */
  id: string;
  eab: { kid: string; hmacKey: string } | null;
  /** CAA `issue` values that allow this CA (RFC 8659 §4.2); the first is the one owners are asked to add */
  caa: string[];
  limits: CaLimits;
}

// the published issuer domain names of the public ACME CAs Portico knows, by directory host suffix
const KNOWN_CAA: ReadonlyArray<[string, string[]]> = [
  ['letsencrypt.org', ['letsencrypt.org']],
  ['zerossl.com', ['sectigo.com', 'zerossl.com']],
  ['pki.goog', ['pki.goog']],
  ['buypass.com', ['buypass.com']],
  ['ssl.com', ['ssl.com']],
];

// https://letsencrypt.org/docs/rate-limits/ (checked 2026): 300 new orders per account per 3 h, 50
// certificates per registered domain per 7 days, 5 authorization failures per identifier per account
// per hour
export const LETS_ENCRYPT_LIMITS: CaLimits = { newOrdersPer3h: 300, certsPerDomainPerWeek: 50, failedValidationsPerHour: 5 };
const NO_LIMITS: CaLimits = { newOrdersPer3h: null, certsPerDomainPerWeek: null, failedValidationsPerHour: null };

function hostOf(directory: string): string {
  try {
    return new URL(directory).host.toLowerCase();
  } catch {
    return directory;
  }
}

function matches(host: string, suffix: string): boolean {
  const name = host.replace(/:\d+$/, '');
  return name === suffix || name.endsWith(`.${suffix}`);
}

export function isLetsEncrypt(directory: string): boolean {
  return matches(hostOf(directory), 'letsencrypt.org');
}

/** The CAA identities of a known CA's directory, else `fallback` (acme.caaIdentities). */
export function defaultCaa(directory: string, fallback: readonly string[]): string[] {
  const host = hostOf(directory);
  return [...(KNOWN_CAA.find(([suffix]) => matches(host, suffix))?.[1] ?? fallback)];
}

export function defaultLimits(directory: string): CaLimits {
  return { ...(isLetsEncrypt(directory) ? LETS_ENCRYPT_LIMITS : NO_LIMITS) };
}

export function issuerId(directory: string): string {
  return createHash('sha256').update(directory).digest('hex').slice(0, 12);
}

export interface IssuerInput {
  directory: string;
  name?: string;
  eab?: { kid: string; hmacKey: string } | null;
  caa?: string[];
  limits?: Partial<CaLimits>;
}

/**
 * The issuers in force: defaults by directory, then the overrides for every issuer (the
 * PORTICO_ACME_* limit variables), then what the issuer's own entry says.
 */
export function resolveIssuers(inputs: IssuerInput[], caaFallback: readonly string[], overrides: Partial<CaLimits>): IssuerSettings[] {
  return inputs.map((input) => {
    const limits = { ...defaultLimits(input.directory) };
    for (const source of [overrides, input.limits ?? {}]) {
      for (const [key, value] of Object.entries(source) as Array<[keyof CaLimits, number | null | undefined]>) {
        if (value !== undefined) limits[key] = value;
      }
    }
    return {
      name: input.name ?? hostOf(input.directory),
      directory: input.directory,
      id: issuerId(input.directory),
      eab: input.eab ?? null,
      caa: (input.caa ?? defaultCaa(input.directory, caaFallback)).map((s) => s.toLowerCase()),
      limits,
    };
  });
}

/** Every issuer's CAA identities, first issuer first: verification passes when CAA allows any of them. */
export function allCaaIdentities(issuers: readonly IssuerSettings[]): string[] {
  return [...new Set(issuers.flatMap((issuer) => issuer.caa))];
}

/** `acme.issuers` from the file: a list of {directory, name?, eab?: {kid, hmacKey}, caa?, limits?}. */
export function parseIssuerEntries(raw: unknown, problems: string[]): IssuerInput[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) {
    problems.push(`acme.issuers must be a list of {directory, name?, eab?, caa?, limits?}, got ${JSON.stringify(raw)}`);
    return [];
  }
  const known = new Set(['directory', 'name', 'eab', 'caa', 'limits']);
  return raw.flatMap((entry: unknown, i): IssuerInput[] => {
    const at = `acme.issuers[${i}]`;
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) {
      problems.push(`${at} must be a mapping {directory, name?, eab?, caa?, limits?}, got ${JSON.stringify(entry)}`);
      return [];
    }
    const e = entry as Record<string, unknown>;
    for (const key of Object.keys(e)) if (!known.has(key)) problems.push(`${at}.${key} is not a known setting`);
    const before = problems.length;
    if (!isUrl(e.directory)) problems.push(`${at}.directory must be an http(s) URL, got ${JSON.stringify(e.directory)}`);
    if (e.name !== undefined && (typeof e.name !== 'string' || !/^[\w.:-]{1,64}$/.test(e.name))) problems.push(`${at}.name must be letters, digits, . _ : - (at most 64), got ${JSON.stringify(e.name)}`);
    let eab: IssuerInput['eab'] = null;
    if (e.eab !== undefined && e.eab !== null) {
      const { kid, hmacKey } = (typeof e.eab === 'object' ? e.eab : {}) as Record<string, unknown>;
      // RFC 8555 §7.3.4: the HMAC key comes base64url-encoded from the CA
      if (typeof kid !== 'string' || kid === '' || typeof hmacKey !== 'string' || !/^[A-Za-z0-9_=-]+$/.test(hmacKey)) {
        problems.push(`${at}.eab must be {kid, hmacKey} as the CA gave them (hmacKey base64url)`);
      } else eab = { kid, hmacKey };
    }
    if (e.caa !== undefined && (!Array.isArray(e.caa) || !e.caa.every((s) => typeof s === 'string' && /^[a-z0-9.-]+$/i.test(s)))) {
      problems.push(`${at}.caa must be a list of CAA issuer domain names (e.g. [letsencrypt.org]), got ${JSON.stringify(e.caa)}`);
    }
    const limits: Partial<CaLimits> = {};
    if (e.limits !== undefined && e.limits !== null) {
      const l = (typeof e.limits === 'object' ? e.limits : {}) as Record<string, unknown>;
      for (const [key, value] of Object.entries(l)) {
        if (!['newOrdersPer3h', 'certsPerDomainPerWeek', 'failedValidationsPerHour'].includes(key)) problems.push(`${at}.limits.${key} is not a known setting`);
        else if (value !== null && (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1)) problems.push(`${at}.limits.${key} must be an integer ≥ 1, or null for none, got ${JSON.stringify(value)}`);
        else limits[key as keyof CaLimits] = value as number | null;
      }
    }
    if (problems.length > before) return [];
    return [{ directory: e.directory as string, ...(e.name === undefined ? {} : { name: e.name as string }), eab, ...(e.caa === undefined ? {} : { caa: e.caa as string[] }), limits }];
  });
}

export function isUrl(value: unknown): value is string {
  if (typeof value !== 'string') return false;
  try {
    return ['https:', 'http:'].includes(new URL(value).protocol);
  } catch {
    return false;
  }
}

const LETS_ENCRYPT_STAGING = 'https://acme-staging-v02.api.letsencrypt.org/directory';

// The `acme` settings (config.ts reads them with this). PORTICO_ACME_DIRECTORY (one URL or several,
// comma-separated; `fromEnv`: it was set) names the issuers and their order;
// without it `acme.issuers` does, else `acme.directory`. An `acme.issuers` entry whose directory is
// in the list lends it its name, EAB, CAA identities and limits.
export function readAcme(read: Reader, problems: string[], fromEnv: boolean): Config['acme'] {
  const entries = parseIssuerEntries(read.value('acme.issuers'), problems);
  const configured = read.value('acme.directory');
  const directories = typeof configured === 'string' ? configured.split(',').map((s) => s.trim()).filter(Boolean) : Array.isArray(configured) ? configured : null;
  if (configured !== undefined && configured !== null && (directories === null || directories.length === 0 || !directories.every(isUrl))) {
    const bad = directories?.find((d) => !isUrl(d)) ?? configured;
    problems.push(`acme.directory (PORTICO_ACME_DIRECTORY) must be a URL or a comma-separated list of URLs, got ${JSON.stringify(bad)}`);
  }
  const list: string[] = directories !== null && directories.every(isUrl) && directories.length > 0 && (fromEnv || entries.length === 0)
    ? directories
    : entries.length > 0 ? entries.map((e) => e.directory) : [LETS_ENCRYPT_STAGING];
  const overrides: Partial<CaLimits> = {};
  for (const key of ['newOrdersPer3h', 'certsPerDomainPerWeek', 'failedValidationsPerHour'] as const) {
    const value = read.int(`acme.limits.${key}`, 0, 1);
    if (value > 0) overrides[key] = value;
  }
  const caaFallback = read.list('acme.caaIdentities', ['letsencrypt.org']).map((s) => s.toLowerCase());
  const issuers = resolveIssuers(list.map((directory) => entries.find((e) => e.directory === directory) ?? { directory }), caaFallback, overrides);
  return {
    directory: list[0],
    issuers,
    email: read.optionalString('acme.email'),
    caaIdentities: allCaaIdentities(issuers),
    onDemandWaitMs: read.ms('acme.onDemandWaitMs', 5000, 0),
  };
}
