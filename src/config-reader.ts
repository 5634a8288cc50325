// Typed reads out of the parsed YAML tree for config.ts, collecting every problem instead of
// stopping at the first one.
import net from 'node:net';
import type { Limit } from './ratelimit/limiter.ts';

/** the longest setTimeout waits (2^31 − 1 ms); Node fires a longer one after 1 ms */
export const MAX_TIMER_MS = 2_147_483_647;

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** the spellings a yes/no setting accepts besides true and false (YAML 1.2 reads `on` as a string) */
export const TRUE_WORDS: readonly string[] = ['true', 'on', 'yes', '1'];
export const FALSE_WORDS: readonly string[] = ['false', 'off', 'no', '0'];

const HOSTNAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

export class Reader {
  private readonly seen = new Set<string>();
  private readonly tree: Record<string, unknown>;
  private readonly problems: string[];
  /** setting → the environment variable that overrides it, to name both in messages */
  private readonly envOf: ReadonlyMap<string, string>;
  constructor(tree: Record<string, unknown>, problems: string[], envOf: ReadonlyMap<string, string>) {
    this.tree = tree;
    this.problems = problems;
    this.envOf = envOf;
  }

  private get(at: string): unknown {
    this.seen.add(at);
    let node: unknown = this.tree;
    for (const part of at.split('.')) {
      if (!isObject(node)) return undefined;
      node = node[part];
    }
    return node;
  }

  /** the raw value of a setting that has its own reader (its whole subtree counts as known) */
  value(at: string): unknown {
    return this.get(at);
  }

  private fail(at: string, what: string): void {
    const name = this.envOf.get(at);
    this.problems.push(`${at}${name ? ` (${name})` : ''} ${what}`);
  }

  /** min 0 for a listener (0: any free port); 1 for a port other machines are told to use */
  port(at: string, fallback: number, min: 0 | 1 = 0): number {
    const v = this.optionalPort(at, min);
    return v ?? fallback;
  }

  optionalPort(at: string, min: 0 | 1 = 0): number | null {
    const v = this.get(at);
    if (v === undefined || v === null) return null;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > 65535) {
      this.fail(at, `must be a port number ${min}–65535, got ${JSON.stringify(v)}`);
      return 0;
    }
    return v;
  }

  int(at: string, fallback: number, min: number): number {
    const v = this.get(at);
    if (v === undefined || v === null) return fallback;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
      this.fail(at, `must be an integer ≥ ${min}, got ${JSON.stringify(v)}`);
      return fallback;
    }
    return v;
  }

  /** a duration in milliseconds: at most what a timer can wait (longer ones fire after 1 ms in Node) */
  ms(at: string, fallback: number, min: number): number {
    const v = this.int(at, fallback, min);
    if (v > MAX_TIMER_MS) {
      this.fail(at, `must be at most ${MAX_TIMER_MS} ms (about 24.8 days, the longest a timer waits), got ${v}`);
      return fallback;
    }
    return v;
  }

  string(at: string, fallback: string): string {
    return this.optionalString(at) ?? fallback;
  }

  optionalString(at: string): string | null {
    const v = this.get(at);
    if (v === undefined || v === null) return null;
    if (typeof v !== 'string' || v.trim() === '') {
      this.fail(at, `must be a non-empty string, got ${JSON.stringify(v)}`);
      return null;
    }
    return v.trim();
  }

  /** a secret (a token): as optionalString, but its value is never repeated in a problem */
  secret(at: string): string | null {
    const v = this.get(at);
    if (v === undefined || v === null) return null;
    if (typeof v !== 'string' || v.trim() === '') {
      this.fail(at, `must be a non-empty string${typeof v === 'string' ? ' (it is blank)' : `, got a ${typeof v}`}`);
      return null;
    }
    // it travels in an Authorization header: a line break or a non-ASCII character cannot
    if (/[^\x20-\x7e]/.test(v.trim())) {
      this.fail(at, 'must be printable ASCII (it is sent in an Authorization header); it holds a control or non-ASCII character');
      return null;
    }
    return v.trim();
  }

  hostname(at: string, fallback: string): string {
    const v = this.string(at, fallback).toLowerCase().replace(/\.$/, '');
    if (!HOSTNAME.test(v)) this.fail(at, `must be a hostname, got ${JSON.stringify(v)}`);
    // an address (or a name ending in an all-digit label, which resolvers read as one) ends up as
    // `CNAME shop 203.0.113.10` in the records owners are shown, and DNS providers refuse that
    else if (/(^|\.)\d+$/.test(v)) this.fail(at, `must be a hostname, not an IP address or a name ending in a number (a CNAME target must be a hostname), got ${JSON.stringify(v)}`);
    return v;
  }

  /**
   * A list of hostnames (the rule of hostname()) or IP addresses (`[::1]` read as `::1`, as a Host
   * header's is), lowercased, without a trailing dot; at least one when `nonEmpty`.
   */
  hostnames(at: string, fallback: string[], nonEmpty: boolean): string[] {
    const list = this.list(at, fallback).map((h) => h.toLowerCase().replace(/\.$/, '').replace(/^\[(.*)\]$/, '$1'));
    const wrong = list.filter((h) => !HOSTNAME.test(h) && net.isIP(h) === 0);
    if (wrong.length > 0) {
      this.fail(at, `must list hostnames such as api.example.com (no scheme, port, path or wildcard) or IP addresses; not ${wrong.map((h) => JSON.stringify(h)).join(', ')}`);
    }
    if (nonEmpty && list.length === 0) this.fail(at, 'must name at least one hostname');
    return list;
  }

  optionalUrl(at: string, protocols: string[]): string | null {
    const v = this.optionalString(at);
    if (v === null) return null;
    try {
      const url = new URL(v);
      if (!protocols.includes(url.protocol)) this.fail(at, `must be a ${protocols.join(' or ')} URL, got ${JSON.stringify(v)}`);
    } catch {
      this.fail(at, `must be a URL, got ${JSON.stringify(v)}`);
    }
    return v;
  }

  list(at: string, fallback: string[]): string[] {
    const v = this.get(at);
    if (v === undefined || v === null) return fallback;
    if (!Array.isArray(v) || !v.every((s) => typeof s === 'string' && s.trim() !== '')) {
      this.fail(at, `must be a list of strings, got ${JSON.stringify(v)}`);
      return fallback;
    }
    return v.map((s: string) => s.trim());
  }

  /** a list, or null when the setting is absent or null */
  optionalList(at: string): string[] | null {
    const v = this.get(at);
    if (v === undefined || v === null) return null;
    const list = this.list(at, []);
    // what is not a list of strings was reported once: null keeps later checks quiet about it
    return Array.isArray(v) && v.length === list.length ? list : null;
  }

  bool(at: string, fallback: boolean): boolean {
    const v = this.get(at);
    if (v === undefined || v === null) return fallback;
    if (typeof v === 'boolean') return v;
    const word = String(v).toLowerCase();
    if ((typeof v === 'string' || typeof v === 'number') && TRUE_WORDS.includes(word)) return true;
    if ((typeof v === 'string' || typeof v === 'number') && FALSE_WORDS.includes(word)) return false;
    this.fail(at, `must be ${TRUE_WORDS.join('/')} or ${FALSE_WORDS.join('/')}, got ${JSON.stringify(v)}`);
    return fallback;
  }

  /** one of `options`, trimmed and case-folded as every other setting is trimmed ("INFO", "closed ") */
  oneOf<T extends string>(at: string, options: readonly T[], fallback: T): T {
    const given = this.get(at);
    if (given === undefined || given === null) return fallback;
    const v = typeof given === 'string' ? given.trim().toLowerCase() : given;
    if (!options.includes(v as T)) {
      this.fail(at, `must be one of ${options.join(', ')}, got ${JSON.stringify(given)}`);
      return fallback;
    }
    return v as T;
  }

  date(at: string, fallback: string): string {
    const v = this.string(at, fallback);
    if (Number.isNaN(Date.parse(v))) this.fail(at, `must be an ISO 8601 date, got ${JSON.stringify(v)}`);
    return v;
  }

  limit(at: string, fallback: Limit): Limit {
    // only the two children are marked as read, so a typo beside them is reported as unknown
    let node: unknown = this.tree;
    for (const part of at.split('.')) node = isObject(node) ? node[part] : undefined;
    if (node !== undefined && node !== null && !isObject(node)) this.fail(at, `must be a mapping {perMinute, perDay}, got ${JSON.stringify(node)}`);
    return { perMinute: this.int(`${at}.perMinute`, fallback.perMinute, 1), perDay: this.int(`${at}.perDay`, fallback.perDay, 1) };
  }

  /** keys in the file that no setting reads are mistakes (a typo silently ignored costs hours) */
  unknownKeys(): void {
    const walk = (node: unknown, prefix: string): void => {
      if (!isObject(node)) return;
      for (const [key, value] of Object.entries(node)) {
        const at = prefix ? `${prefix}.${key}` : key;
        if (this.seen.has(at)) continue;
        const known = [...this.seen].some((s) => s.startsWith(`${at}.`));
        if (!known) this.problems.push(`${at} is not a known setting`);
        else walk(value, at);
      }
    };
    walk(this.tree, '');
  }
}

