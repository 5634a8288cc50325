// What RFC 9112 asks of an HTTP/1.1 request's Host and target beyond what Node's parser (llhttp)
// already refuses with its own 400 (CL with TE, two Content-Lengths, obs-fold, bare LF, NUL, no Host):
// 1. more than one Host field line → 400 (§3.2): two Hosts let two parsers pick different sites;
// 2. an absolute-form target (`GET https://shop.example.com/x HTTP/1.1`) names the site by its
//    authority, and the Host field is ignored (§3.2.2): the request is rewritten to origin-form with
//    Host = that authority, so routing, the SNI rule (421) and the upstream all see the one name.
//    Only http and https URIs with an authority and no userinfo (RFC 9110 §4.2.4) are accepted.
import type { IncomingMessage } from 'node:http';

// scheme, authority (no userinfo, no whitespace), then the path and query, if any (§3.2.2, RFC 3986 §3)
const ABSOLUTE_FORM = /^https?:\/\/([^/?#@\s]+)([/?][^#\s]*)?$/i;

/** null when the request may go on (rewritten in place if it was absolute-form), else why it is a 400 */
export function checkTarget(req: IncomingMessage): string | null {
  const raw = req.rawHeaders;
  let hosts = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i];
    if (name.length === 4 && name.toLowerCase() === 'host') hosts++;
  }
  if (hosts > 1) return 'A request must carry one Host header field (RFC 9112 §3.2).';
  const url = req.url ?? '/';
  // origin-form (nearly every request) and `OPTIONS *` need nothing more
  if (url.charCodeAt(0) === 47 /* / */ || url === '*') return null;
  const absolute = ABSOLUTE_FORM.exec(url);
  if (!absolute) return 'The request target must be a path or an absolute http(s) URI (RFC 9112 §3.2).';
  const path = absolute[2] ?? '/';
  req.headers.host = absolute[1];
  req.url = path.charCodeAt(0) === 63 /* ? */ ? `/${path}` : path;
  return null;
}
