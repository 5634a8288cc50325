// What a DNS server answered, asked once and shown safely. Answers are untrusted input: whoever runs
// a domain's DNS chooses them, and they end up in diagnostics, on the timeline and in the CLI and the
// dashboard. So what is quoted from them is bounded (a name may carry 60 TXT records of 240 bytes: one
// check then wrote a 30 KB event, and 200 events are kept per domain) and made printable (a newline
// in a TXT or CAA value must not start what reads as another line of a message).
import type { Diagnostic } from './verifier.ts';

/** the records quoted from one answer; the rest are counted */
export const SHOWN_RECORDS = 5;
/** the characters quoted from one TXT value */
export const SHOWN_TXT_CHARS = 100;
/** the characters quoted from one name or address (a name has at most 253, some escaped) */
export const SHOWN_NAME_CHARS = 255;

export type Answer<T> = { ok: T } | { absent: true } | { error: Diagnostic };

// NXDOMAIN and NODATA are answers ("nothing there"); anything else means we could not find out.
export async function query<T>(what: string, name: string, run: () => Promise<T[]>): Promise<Answer<T[]>> {
  try {
    const records = await run();
    return records.length === 0 ? { absent: true } : { ok: records };
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'ENOTFOUND' || code === 'ENODATA') return { absent: true };
    const reason = code === 'ETIMEOUT' ? 'timed out' : code === 'ESERVFAIL' ? 'failed (SERVFAIL)' : `failed (${printable(String(code ?? err))})`;
    return { error: { code: 'dns_error', message: `The DNS query for the ${what} record of ${printable(name)} ${reason}. This is usually temporary at the DNS provider: verify again in a few minutes.` } };
  }
}

// C0 and C1 controls, DEL, the line and paragraph separators, and the marks that reorder text on
// screen (bidi overrides and isolates): none belongs in a DNS value, each can make a message lie
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/gu;
const SHORT: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** `value` with every unprintable character written as an escape (`\n`, `\x07`, `\u2028`) */
export function printable(value: string): string {
  return value.replace(UNPRINTABLE, (c) => SHORT[c] ?? (c.charCodeAt(0) <= 0xff ? `\\x${hex(c, 2)}` : `\\u${hex(c, 4)}`));
}

/** printable(value), cut after `max` characters saying how long it was; never inside an escape */
export function shortened(value: string, max: number): string {
  const shown = printable(value);
  if (shown.length <= max) return shown;
  // the cut falls between two characters of `value`: the escapes that start before `max` are kept whole
  let cut = 0;
  for (const c of value) {
    const width = printable(c).length;
    if (cut + width > max) break;
    cut += width;
  }
  return `${shown.slice(0, cut)}… (${value.length} characters)`;
}

/**
 * At most SHOWN_RECORDS of `values`, each made printable and cut at `max` characters, then
 * "and N more" when there were more: for a diagnostic's `found` and its message.
 */
export function shownList(values: readonly string[], max: number): string[] {
  const shown = values.slice(0, SHOWN_RECORDS).map((value) => shortened(value, max));
  return values.length > SHOWN_RECORDS ? [...shown, `and ${values.length - SHOWN_RECORDS} more`] : shown;
}

/** shownList(values) as prose: `"a", "b" and 3 more` (quoted when `quote`) */
export function listed(values: readonly string[], max: number, quote = false): string {
  const shown = shownList(values, max);
  const more = values.length > SHOWN_RECORDS ? shown.pop()! : null;
  const items = quote ? shown.map((value) => `"${value}"`) : shown;
  return more === null ? items.join(', ') : `${items.join(', ')} ${more}`;
}

/** lowercase, without the trailing dot */
export function normalise(name: string): string {
  const lower = name.trim().toLowerCase();
  return lower.endsWith('.') ? lower.slice(0, -1) : lower;
}

function hex(c: string, width: number): string {
  return c.charCodeAt(0).toString(16).padStart(width, '0');
}
