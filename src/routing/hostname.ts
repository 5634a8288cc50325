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
    const end = host.indexOf(']');
    return end === -1 ? '' : host.slice(1, end).toLowerCase();
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

export function isIpLiteral(name: string): boolean {
  return net.isIP(name.startsWith('[') ? name.slice(1, -1) : name) !== 0;
}
