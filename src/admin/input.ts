// What the admin API quotes of what a caller sent. A quote is made printable and bounded, as DNS and
// CA text is (dns-answers.ts): an escape sequence or a bidi override in a hostname must not repaint
// the terminal or reorder the line the CLI prints, and a 60 KB value must not come back as a 60 KB
// message (to the dashboard and the CLI).
import { printable, shortened } from '../domains/dns-answers.ts';
import { HttpError } from '../errors.ts';
import type { DomainHealth, DomainStatus } from '../state/types.ts';

/** the characters quoted from one value a caller sent */
export const SHOWN_INPUT_CHARS = 100;
/**
 * a whole admin error message, after escaping: past it, a quote nobody bounded is cut (room enough for
 * every problem a refused reload lists)
 */
const MAX_MESSAGE_CHARS = 4000;
/** a hostname has at most 253 characters (RFC 1035 §2.3.4), one more with its trailing dot */
const MAX_HOSTNAME_CHARS = 254;
const EXAMPLE = 'use a hostname such as shop.example.com';

export const DOMAIN_STATUSES: readonly DomainStatus[] = ['pending', 'verified', 'failed'];
export const HEALTHS: readonly DomainHealth[] = ['ok', 'misconfigured'];

/** `value` printable and cut at `max` characters saying how long it was, in double quotes */
export function quoted(value: string, max = SHOWN_INPUT_CHARS): string {
  return `"${shortened(value, max)}"`;
}

/** `value` printable and cut at `max` characters (an id in "No project …") */
export function shown(value: string, max = SHOWN_INPUT_CHARS): string {
  return shortened(value, max);
}

/** what a JSON value is, for "got a number" */
export function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object';
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  return `a ${typeof value}`;
}

/**
 * The error as the admin API answers it: its message printable and bounded. Quotes are bounded where
 * they are made; this catches text quoted elsewhere (a JSON parser's excerpt of the body, a hostname
 * echoed by the domain rules). The product's own text has nothing to escape, so it reads the same.
 */
export function answerable(err: unknown): unknown {
  if (!(err instanceof HttpError)) return err;
  const message = shortened(err.message, MAX_MESSAGE_CHARS);
  return message === err.message ? err : new HttpError(err.code, message, err.headers);
}

/**
 * The `hostname` of a new domain, refused here when it cannot be one for what it is, not what it
 * says: not a string, holding a control character or a mark that reorders text, or longer than any
 * hostname. Anything else goes on to the domain rules, which check what it says.
 */
export function hostnameInput(value: unknown): unknown {
  if (value === undefined || value === '') return value;
  if (typeof value !== 'string') {
    throw new HttpError('invalid_hostname', `"hostname" must be a string, such as "shop.example.com"; got ${kindOf(value)}.`);
  }
  // around the name, a line break or a tab is trimmed away (as a pasted name often ends), not refused
  const bad = unprintable(value.trim());
  if (bad) throw new HttpError('invalid_hostname', `${quoted(value)} contains "${printable(bad)}", which cannot appear in a hostname; ${EXAMPLE}`);
  if (value.trim().length > MAX_HOSTNAME_CHARS) {
    throw new HttpError('invalid_hostname', `${quoted(value, 40)} is longer than any hostname: a hostname has at most 253 characters; ${EXAMPLE}`);
  }
  return value;
}

/**
 * Whether a hostname given in a path (or as a redirect's `from`) could name a stored domain at all.
 * One that cannot is not a domain of the project, said with the name quoted safely.
 */
export function domainName(hostname: string, projectName: string): string {
  if (unprintable(hostname.trim()) || hostname.trim().length > MAX_HOSTNAME_CHARS) {
    throw new HttpError('not_found', `${quoted(hostname)} is not a domain of project ${projectName}.`);
  }
  return hostname;
}

/**
 * A query filter: absent is no filter; given twice is refused (which one would count?); with
 * `allowed`, any other value, the empty one too, is refused.
 */
export function queryFilter(query: URLSearchParams, name: string, allowed?: readonly string[]): string | null {
  const values = query.getAll(name);
  if (values.length === 0) return null;
  const oneOf = allowed ? `one of ${allowed.join(', ')}` : '';
  if (values.length > 1) throw new HttpError('invalid_request', `"${name}" is given ${values.length} times; give it once${allowed ? ` (${oneOf})` : ''}.`);
  const [value] = values;
  // `?accountId=` from an empty shell variable filtered nothing: every account's projects were listed
  if (!allowed && value === '') throw new HttpError('invalid_request', `"${name}" is empty; give a value, or leave "${name}" out for no filter.`);
  if (allowed && !allowed.includes(value)) {
    throw new HttpError('invalid_request', `"${name}" must be ${oneOf}; got ${value === '' ? 'an empty value' : quoted(value)}. Leave "${name}" out for every domain.`);
  }
  return value;
}

/** The path's parameters decoded; a refusal says whether the encoding is broken or its bytes are not UTF-8. */
export function pathParams(groups: Record<string, string>): Record<string, string> {
  const params: Record<string, string> = {};
  for (const [name, raw] of Object.entries(groups)) {
    try {
      params[name] = decodeURIComponent(raw);
    } catch {
      const broken = /%(?![0-9a-f]{2})/i.exec(raw);
      throw new HttpError('invalid_request', broken
        ? `The path is not valid percent-encoding: in ${quoted(raw)}, a "%" must be followed by two hexadecimal digits.`
        : `${quoted(raw)} in the path is valid percent-encoding, but of bytes that are not UTF-8; a name in a path is UTF-8, percent-encoded (bücher → b%C3%BCcher).`);
    }
  }
  return params;
}

function unprintable(value: string): string | null {
  for (const c of value) if (printable(c) !== c) return c;
  return null;
}
