// An upstream's repeated header field, for an HTTP/2 visitor. HTTP/1.1 carries a field given twice as
// two lines; Node's HTTP/2 sends some fields at most once (its kSingleValueFields: respond() throws
// ERR_HTTP2_HEADER_SINGLE_VALUE on a second one, and the answer became a 502 page). A framework and a
// middleware each adding `X-Content-Type-Options: nosniff` is common. Shared by the core stream path
// (forward-h2.ts) and the compatibility layer's (forward.ts).
import { UpstreamError } from './upstream-error.ts';

/** Node's single-value fields, pseudo-headers and content-length (Portico's own) left out */
export const SINGLE_VALUE: ReadonlySet<string> = new Set([
  'access-control-allow-credentials', 'access-control-max-age', 'access-control-request-method', 'age',
  'authorization', 'content-encoding', 'content-language', 'content-location', 'content-md5',
  'content-range', 'content-type', 'date', 'dnt', 'etag', 'expires', 'from', 'host', 'if-match',
  'if-modified-since', 'if-none-match', 'if-range', 'if-unmodified-since', 'last-modified', 'location',
  'max-forwards', 'proxy-authorization', 'range', 'referer', 'retry-after', 'tk',
  'upgrade-insecure-requests', 'user-agent', 'x-content-type-options',
]);

// Among them, those whose value is a comma-separated list (RFC 9110 §8.4 Content-Encoding, §8.5
// Content-Language; Fetch reads X-Content-Type-Options as one): lines joined with ", " mean what the
// repeated lines meant (RFC 9110 §5.3)
const LIST_VALUED: ReadonlySet<string> = new Set(['content-encoding', 'content-language', 'x-content-type-options']);

/**
 * The one value to send for a single-value field `name` that came as `first`, then `value`: the same
 * value passes once; a list field's values are joined. Any other pair is two answers in one (two
 * Content-Types, two Locations): which one a visitor would act on is not Portico's to pick, so it
 * throws, from the exchange's onHead: the invalid_response 502 page (HTTP/1.1 visitors get both lines,
 * as they came).
 */
export function joinRepeated(name: string, first: string, value: string): string {
  if (value === first) return first;
  if (LIST_VALUED.has(name)) return first === '' ? value : value === '' ? first : `${first}, ${value}`;
  throw new UpstreamError('invalid_response', `the upstream sent ${name} twice with different values`);
}
