// What RFC 9112 asks of an HTTP/1.1 request's Host and target beyond what Node's parser (llhttp)
// already refuses with its own 400 (CL with TE, two Content-Lengths, obs-fold, bare LF, NUL):
// 0. an HTTP/0.9 request line (no version) → 400;
// 1. no Host field line, or more than one → 400 (§3.2): two Hosts let two parsers pick different sites;
// 2. the asterisk-form target `*` goes with OPTIONS only (§3.2.4) → 400 with any other method;
// 3. an absolute-form target (`GET https://shop.example.com/x HTTP/1.1`) names the site by its
//    authority, and the Host field is ignored (§3.2.2): the request is rewritten to origin-form with
//    Host = that authority, so routing, the SNI rule (421) and the upstream all see the one name.
//    Only http and https URIs with an authority and no userinfo (RFC 9110 §4.2.4) are accepted.
// And what RFC 9113 asks of an HTTP/2 request's authority (checkAuthority below).
import type { IncomingMessage } from 'node:http';
import type { IncomingHttpHeaders } from 'node:http2';
import { hostnameFromHost } from '../routing/hostname.ts';

// scheme, authority (no userinfo, no whitespace), then the path and query, if any (§3.2.2, RFC 3986 §3)
const ABSOLUTE_FORM = /^https?:\/\/([^/?#@\s]+)([/?][^#\s]*)?$/i;

/** null when the request may go on (rewritten in place if it was absolute-form), else why it is a 400 */
export function checkTarget(req: IncomingMessage): string | null {
  // a request line without a version is HTTP/0.9 (RFC 9112 Appendix C.1), which has no Host and no
  // fields at all: whatever the parser read after it is nothing a client meant
  if (req.httpVersionMajor === 0) return 'HTTP/0.9 requests are not served: send HTTP/1.1 or HTTP/2.';
  const raw = req.rawHeaders;
  let hosts = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i];
    if (name.length === 4 && name.toLowerCase() === 'host') hosts++;
  }
  if (hosts > 1) return 'A request must carry one Host header field (RFC 9112 §3.2).';
  const url = req.url ?? '/';
  // origin-form (nearly every request) and `OPTIONS *` need nothing more than the Host naming the site
  // (HTTP/1.0 may leave it out, but then no site is named: an absolute-form target names one itself)
  if (url.charCodeAt(0) === 47 /* / */ || url === '*') {
    if (url === '*' && req.method !== 'OPTIONS') return 'The target * is for OPTIONS only (RFC 9112 §3.2.4).';
    return hosts === 1 ? null : 'A request must carry a Host header field naming the site (RFC 9112 §3.2).';
  }
  const absolute = ABSOLUTE_FORM.exec(url);
  if (!absolute) return 'The request target must be a path or an absolute http(s) URI (RFC 9112 §3.2).';
  const path = absolute[2] ?? '/';
  req.headers.host = absolute[1];
  req.url = path.charCodeAt(0) === 63 /* ? */ ? `/${path}` : path;
  return null;
}

/**
 * RFC 9113 §8.3.1: an HTTP/2 request whose Host field names another site than its :authority is
 * malformed (400), as two Host fields are over HTTP/1.1: two names let two readers pick different
 * sites. Letter case, a trailing dot and the default port (443) do not make another site. null when
 * the request may go on (no Host field, nearly every HTTP/2 request, or the same site).
 */
export function checkAuthority(headers: IncomingHttpHeaders): string | null {
  const host = headers.host;
  const authority = headers[':authority'];
  if (host === undefined || authority === undefined || host === authority) return null;
  const hostname = hostnameFromHost(host);
  if (hostname !== '' && hostname === hostnameFromHost(authority) && portOf(host) === portOf(authority)) return null;
  return 'The Host header field names another site than :authority (RFC 9113 §8.3.1).';
}

/** the port an authority names, '' for none or the default 443 */
function portOf(authority: string): string {
  const colon = authority.indexOf(':', authority.startsWith('[') ? authority.indexOf(']') : 0);
  const port = colon === -1 ? '' : authority.slice(colon + 1);
  return port === '443' ? '' : port;
}
