// Checks of single settings for config.ts, beyond their type: what would pass as a string or a URL
// and fail later (a bind, a resolver, OpenSSL, the CA at the first order) is a problem at start.
import net from 'node:net';
import { isUrl } from './certs/issuers.ts';

/**
 * The ACME account contact as an address (the issuer adds `mailto:`, RFC 8555 §7.3): a leading
 * `mailto:` is dropped, and anything not shaped like local@domain.tld is a problem; null when unset.
 */
export function acmeEmail(email: string | null, problems: string[]): string | null {
  if (email === null) return null;
  const address = email.replace(/^mailto:/i, '');
  if (/^[^\s@,]+@[^\s@,.]+(\.[^\s@,.]+)+$/.test(address)) return address;
  problems.push(`acme.email (PORTICO_ACME_EMAIL) must be an e-mail address such as ops@example.com, got ${JSON.stringify(email)}`);
  return null;
}

/** `a/dir b/dir` parses as one URL (path `dir%20b/dir`): whitespace inside an entry is a problem */
export function acmeDirectoryProblems(configured: unknown): string[] {
  const entries: unknown[] = typeof configured === 'string' ? configured.split(',') : Array.isArray(configured) ? configured : [];
  return entries
    .filter((e): e is string => typeof e === 'string' && /\s/.test(e.trim()) && isUrl(e.trim()))
    .map((e) => `acme.directory (PORTICO_ACME_DIRECTORY): ${JSON.stringify(e.trim())} has a space in it; several directories are separated by commas`);
}

/**
 * An IP address to bind (`[::1]` read as `::1`); null when `host` is. Names are refused: a name that
 * resolves to several addresses would bind only the first, which is rarely what was meant.
 */
export function ipAddress(host: string | null, setting: string, examples: string, problems: string[]): string | null {
  if (host === null) return null;
  const address = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (net.isIP(address) !== 0) return address;
  problems.push(`${setting} must be an IP address such as ${examples}, got ${JSON.stringify(host)}`);
  return null;
}

/**
 * What is wrong with one resolver (null: nothing): an IP address with an optional port (53 when
 * absent), IPv6 in brackets when a port follows; what node:dns's setServers takes. Names are refused:
 * the resolvers cannot be found without a resolver.
 */
export function dnsServerProblem(server: string): string | null {
  const form = 'is not an IP address with an optional port (1.1.1.1, 1.1.1.1:53, [2606:4700:4700::1111]:53)';
  if (net.isIPv6(server)) return null;
  const m = /^\[([^\]]*)\](?::([^:]*))?$/.exec(server) ?? /^([^:[\]]*)(?::([^:]*))?$/.exec(server);
  if (!m) return form;
  if (net.isIP(m[1]) === 0 || (server.startsWith('[') && !net.isIPv6(m[1]))) return form;
  if (m[2] !== undefined && (!/^\d{1,5}$/.test(m[2]) || Number(m[2]) < 1 || Number(m[2]) > 65535)) return `has a port outside 1–65535`;
  return null;
}

/** Each name must be a group this Node's OpenSSL can offer, one per entry (OpenSSL would read `a:b` as two). */
export function keyExchangeProblems(groups: string[]): string[] {
  const at = 'https.keyExchange (PORTICO_HTTPS_KEY_EXCHANGE)';
  if (groups.length === 0) return [`${at} must name at least one group, or be null for the default`];
  // node:tls only when the setting is used: the CLI's admin commands load this module too (~6 ms)
  const { createSecureContext } = process.getBuiltinModule('node:tls');
  const accepted = (list: string) => {
    try {
      createSecureContext({ ecdhCurve: list });
      return true;
    } catch {
      return false;
    }
  };
  const unknown = groups.filter((name) => !/^[A-Za-z0-9_-]+$/.test(name) || !accepted(name));
  if (unknown.length > 0) return [`${at}: ${unknown.map((n) => JSON.stringify(n)).join(', ')} ${unknown.length === 1 ? 'is not a key exchange group' : 'are not key exchange groups'} this Node's OpenSSL ${process.versions.openssl} knows (for example X25519MLKEM768, X25519, P-256, P-384)`];
  // each name alone may pass where the list does not: `auto` (OpenSSL's own default) only stands alone
  return accepted(groups.join(':')) ? [] : [`${at}: OpenSSL refuses the list ${JSON.stringify(groups.join(','))} as a whole (\`auto\` must stand alone)`];
}
