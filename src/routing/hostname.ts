// hostname: what the client sent (SNI or Host), normalised — lowercase, no port, no trailing dot,
// punycode (IDNA). '' when it cannot be a hostname.
import { domainToASCII } from 'node:url';
import net from 'node:net';

const ASCII_HOSTNAME = /^[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*$/;
/** ASCII that is not a letter, digit, '-', '.' or '_' (letters are lowercase by then) */
const NOT_IN_A_HOSTNAME = /[\x00-\x2c\x2f\x3a-\x40\x5b-\x5e\x60\x7b-\x7f]/;

export function hostnameFromHost(host: string | undefined): string {
  if (!host) return '';
  if (host.startsWith('[')) {
    // brackets hold an IPv6 address (RFC 3986 §3.2.2), then only a port may follow
    const end = host.indexOf(']');
    const inside = end === -1 ? '' : host.slice(1, end);
    return net.isIPv6(inside) && /^(:\d*)?$/.test(host.slice(end + 1)) ? inside.toLowerCase() : '';
  }
  const colon = host.indexOf(':');
  return normaliseHostname(colon === -1 ? host : host.slice(0, colon));
}

export function normaliseHostname(name: string): string {
  let hostname = name.trim().toLowerCase();
  if (hostname.endsWith('.')) hostname = hostname.slice(0, -1);
  if (hostname === '' || hostname.length > 253) return '';
  if (net.isIP(hostname)) return hostname;
  if (ASCII_HOSTNAME.test(hostname)) return hostname;
  // domainToASCII parses like a URL's host: 'shop.example.com/x' or 'a@shop.example.com' would come out
  // as shop.example.com. Only what IDNA turns into a hostname goes on: non-ASCII letters among these
  if (NOT_IN_A_HOSTNAME.test(hostname)) return '';
  const ascii = domainToASCII(hostname);
  return ascii && ASCII_HOSTNAME.test(ascii) ? ascii : '';
}

/**
 * Whether a connection's SNI names another site than a request's hostname (421): compared as
 * hostnames, so case, a trailing dot and a U-label do not make another site. No SNI, or an IP
 * literal SNI (which names no site): the request's hostname decides.
 */
export function sniNamesAnother(sni: string | false | null | undefined, hostname: string): boolean {
  // the same name (nearly every request) settles it before any parsing
  if (!sni || sni === hostname) return false;
  return !isIpLiteral(sni) && normaliseHostname(sni) !== hostname;
}

export function isIpLiteral(name: string): boolean {
  return net.isIP(name.startsWith('[') ? name.slice(1, -1) : name) !== 0;
}
