// Which hostnames an owner may add as a domain (and name as a redirect's target), and the DNS records
// they are shown (DESIGN §5).
// Pure: no I/O. The registrable domain comes from the Public Suffix List (tldts, ICANN section only:
// an owner of foo.github.io does not control the github.io zone's apex records the way an owner of
// example.com does, but they add CNAMEs under it all the same).
import net from 'node:net';
import { domainToASCII, domainToUnicode } from 'node:url';
import { createRequire } from 'node:module';

export interface HostnameRules {
  platformDomain: string;
  apiHosts: readonly string[];
  cnameTarget: string;
}

/** `label` is the part left of the registrable domain, `@` for the apex. */
export interface DomainHostname {
  hostname: string;
  apex: boolean;
  label: string;
}

// record names are relative to the zone (the registrable domain), as DNS providers' forms expect
export type { DnsRecord } from '../state/types.ts';
import type { DnsRecord } from '../state/types.ts';

// tldts builds its Public Suffix List trie as it loads (~10 ms, ~7 MiB): loaded with the first
// hostname checked rather than at start, which does not need it
let tldts: typeof import('tldts') | undefined;
export function publicSuffixList(): typeof import('tldts') {
  return (tldts ??= createRequire(import.meta.url)('tldts') as typeof import('tldts'));
}

const EXAMPLE = 'use a hostname such as shop.example.com';
const LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
// Characters a user may type that are not ASCII hostname characters go through IDNA; ASCII ones
// outside this set are refused here, because domainToASCII parses like a URL host ('a/b.com' → 'a',
// '%41' → 'A') and would otherwise turn a typo into a different hostname.
const ASCII_OUTSIDE_HOSTNAME = /[\x00-\x2c\x2f\x3a-\x60\x7b-\x7f]/;

export function validateDomainHostname(input: unknown, rules: HostnameRules): DomainHostname | { error: string } {
  const checked = validateHostname(input, `IP addresses cannot be added as domains; ${EXAMPLE}`);
  if ('error' in checked) return checked;
  const { hostname } = checked;
  if (hostname === 'localhost' || hostname.endsWith('.localhost')) return { error: `localhost names cannot be added as domains; ${EXAMPLE}` };

  const platform = normalise(rules.platformDomain);
  if (isAtOrUnder(hostname, platform)) return { error: `Hostnames at or under ${platform} are provided by the platform and cannot be added as domains` };
  if (rules.apiHosts.some((api) => normalise(api) === hostname)) return { error: `${hostname} is an API hostname of the platform and cannot be added as a domain` };
  const target = normalise(rules.cnameTarget);
  if (isAtOrUnder(hostname, target)) return { error: `${hostname} is the platform's CNAME target; add your own hostname and point it at ${target}` };

  // tldts applies the PSL default rule `*` to unknown TLDs, so shop.example.test → example.test
  const registrable = publicSuffixList().getDomain(hostname, { allowPrivateDomains: false });
  if (!registrable) return { error: `${hostname} is a public suffix (like co.uk), which nobody registers; add a domain under it, such as example.${hostname}` };
  const apex = registrable === hostname;
  return { hostname, apex, label: apex ? '@' : hostname.slice(0, -(registrable.length + 1)) };
}

/**
 * What makes a name a hostname at all, for a domain and for a redirect's target alike: not an IP
 * address (`ipAddress` says so), no wildcard, IDNA that converts and decodes, a last label that is not
 * a number (WHATWG URL parsing reads `example.123` as an IPv4 address), labels ≤ 63, total ≤ 253, at
 * least two labels. What a domain may not be besides (localhost, the platform's names, a public
 * suffix) is validateDomainHostname's.
 */
export function validateHostname(input: unknown, ipAddress: string): { hostname: string } | { error: string } {
  const name = typeof input === 'string' ? normalise(input) : '';
  if (name === '') return { error: `A hostname is required; ${EXAMPLE}` };
  if (isIpLiteral(name)) return { error: ipAddress };
  if (name.includes('*')) return { error: `Wildcard hostnames cannot be added as domains; add each hostname on its own, such as shop.example.com` };
  const bad = ASCII_OUTSIDE_HOSTNAME.exec(name);
  if (bad) return { error: `"${name}" contains ${JSON.stringify(bad[0])}, which cannot appear in a hostname; ${EXAMPLE}` };

  if (/(^|\.)(\d+|0x[0-9a-f]*)$/.test(name)) return { error: `"${name}" ends in a number, which makes it read as an IP address; ${EXAMPLE}` };
  const hostname = domainToASCII(name);
  if (hostname === '') return { error: `"${name}" is not a valid hostname (it cannot be converted to IDNA); ${EXAMPLE}` };
  // WHATWG host parsing reads '1.2.3' and '0x7f.1' as IPv4 addresses
  if (net.isIP(hostname) !== 0) return { error: ipAddress };

  const labels = hostname.split('.');
  for (const label of labels) {
    if (label === '') return { error: `"${hostname}" has an empty label (two dots in a row, or a leading dot); ${EXAMPLE}` };
    if (label.length > 63) return { error: `The label "${label.slice(0, 20)}…" is ${label.length} characters long; each part of a hostname between dots can have at most 63` };
    if (!LABEL.test(label)) return { error: `The label "${label}" is not valid: use letters, digits and hyphens, not starting or ending with a hyphen` };
    if (label.startsWith('xn--') && !isPunycode(label)) return { error: `The label "${label}" is not valid IDNA (punycode); enter the name in its Unicode form or check its spelling` };
  }
  if (hostname.length > 253) return { error: `"${hostname.slice(0, 30)}…" is ${hostname.length} characters long; a hostname can have at most 253` };
  if (labels.length < 2) return { error: `"${hostname}" is a single label; ${EXAMPLE}` };
  return { hostname };
}

/** What the owner creates at their DNS provider; names are relative to the registrable domain. */
export function dnsRecords(h: DomainHostname, cnameTarget: string, ownershipToken?: string): DnsRecord[] {
  const records: DnsRecord[] = h.apex
    ? [{
        type: 'ALIAS',
        name: '@',
        value: cnameTarget,
        ttl: 3600,
        note: `ALIAS/ANAME (CNAME flattening) at the apex is provider-specific; if your DNS provider has no such record type, create A/AAAA records with the addresses ${cnameTarget} resolves to, or add www.${h.hostname} as a CNAME instead`,
      }]
    : [{ type: 'CNAME', name: h.label, value: cnameTarget, ttl: 3600 }];
  if (ownershipToken !== undefined) {
    records.push({ type: 'TXT', name: h.apex ? '_portico' : `_portico.${h.label}`, value: ownershipToken, ttl: 3600 });
  }
  return records;
}

function isIpLiteral(name: string): boolean {
  const bare = name.startsWith('[') && name.endsWith(']') ? name.slice(1, -1) : name;
  return net.isIP(bare) !== 0;
}

// domainToUnicode leaves a label it cannot decode unchanged; a valid one round-trips.
function isPunycode(label: string): boolean {
  const unicode = domainToUnicode(label);
  return unicode !== label && domainToASCII(unicode) === label;
}

/** The form hostnames are stored in (lowercase, no trailing dot, IDNA labels as punycode), for looking
 * up a name given in a path or a redirect; a name IDNA cannot convert is returned as it is, and then
 * matches nothing. */
export function storedHostname(name: string): string {
  const normalised = normalise(name);
  if (!/[^\x00-\x7f]/.test(normalised) || ASCII_OUTSIDE_HOSTNAME.test(normalised)) return normalised;
  return domainToASCII(normalised) || normalised;
}

function normalise(hostname: string): string {
  const lower = hostname.trim().toLowerCase();
  return lower.endsWith('.') ? lower.slice(0, -1) : lower;
}

function isAtOrUnder(hostname: string, parent: string): boolean {
  return parent !== '' && (hostname === parent || hostname.endsWith(`.${parent}`));
}
