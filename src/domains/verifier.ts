// DNS verification of a domain (DESIGN §6): does it point at us, may our CA issue for it, and (when a
// takeover guard applies) does the owner hold its zone. Every finding is returned, each with a
// stable code and a message that says what to do. The resolver is injected; this never runs inside
// a TLS handshake.
import { Resolver as DnsResolver } from 'node:dns/promises';
import { checkCaa, type AccountUris } from './caa.ts';
import { listed, normalise, query, shortened, shownList, SHOWN_NAME_CHARS, SHOWN_TXT_CHARS, type Answer } from './dns-answers.ts';

export { checkCaa, VALIDATION_METHOD, type CaaOptions } from './caa.ts';

export interface CaaRecord {
  critical: number;
  issue?: string;
  issuewild?: string;
  iodef?: string;
}

/** node:dns/promises' shape: rejects with `code` ENOTFOUND (NXDOMAIN) or ENODATA (no records of that type) when nothing is there. */
export interface Resolver {
  resolveCname(name: string): Promise<string[]>;
  resolve4(name: string): Promise<string[]>;
  resolve6(name: string): Promise<string[]>;
  resolveCaa(name: string): Promise<CaaRecord[]>;
  resolveTxt(name: string): Promise<string[][]>;
}

export type DiagnosticCode =
  | 'cname_missing'
  | 'cname_mismatch'
  | 'a_record_conflict'
  | 'apex_address_mismatch'
  | 'caa_blocks_ca'
  | 'ownership_txt_missing'
  | 'dns_error';

export interface Diagnostic {
  code: DiagnosticCode;
  message: string;
  found?: string[];
  expected?: string;
}

export interface VerifyInput {
  hostname: string;
  apex: boolean;
  cnameTarget: string;
  /** CAA issuer domains of the CAs we order from (e.g. letsencrypt.org); the first is the one we ask owners to add */
  caaIdentities: readonly string[];
  /** Portico's ACME account URIs, for CAA `accounturi` (RFC 8657 §3); unknown when absent (caa.ts) */
  accountUris?: AccountUris;
  ownershipToken?: string;
}

export interface Verification {
  verified: boolean;
  /** every finding may just be DNS that has not propagated yet (or a transient error): keep checking */
  pending: boolean;
  diagnostics: Diagnostic[];
}

const PROPAGATION = 'DNS changes can take up to 48 hours to appear, most appear within minutes';
const MAYBE_NOT_PROPAGATED = new Set<DiagnosticCode>(['cname_missing', 'ownership_txt_missing', 'dns_error']);

/** `servers` are "ip" or "ip:port" entries; empty keeps the system's resolvers. */
export function systemResolver(servers: readonly string[], timeoutMs = 2000): Resolver {
  const resolver = new DnsResolver({ timeout: timeoutMs, tries: 2 });
  if (servers.length > 0) resolver.setServers([...servers]);
  return resolver;
}

export async function verifyDomain(input: VerifyInput, resolver: Resolver): Promise<Verification> {
  const hostname = normalise(input.hostname);
  const target = normalise(input.cnameTarget);
  const found = await Promise.all([
    input.apex ? checkApex(hostname, target, resolver) : checkSubdomain(hostname, target, resolver),
    checkCaa(hostname, input.caaIdentities, resolver, { cnameTarget: target, accountUris: input.accountUris }),
    input.ownershipToken === undefined ? [] : checkOwnership(hostname, input.ownershipToken, resolver),
  ]);
  const diagnostics = found.flat();
  return {
    verified: diagnostics.length === 0,
    pending: diagnostics.length > 0 && diagnostics.every((d) => MAYBE_NOT_PROPAGATED.has(d.code)),
    diagnostics,
  };
}

async function checkSubdomain(hostname: string, target: string, resolver: Resolver): Promise<Diagnostic[]> {
  const cname = await query('CNAME', hostname, () => resolver.resolveCname(hostname));
  if ('error' in cname) return [cname.error];
  if ('ok' in cname) {
    const values = cname.ok.map(normalise);
    if (values.includes(target)) return [];
    const via = await chainTo(values[0], target, resolver);
    const chain = via === null ? '' : ` It leads there through ${[shortened(values[0], CHAIN_NAME_CHARS), ...via].join(' → ')}, but a chain breaks when one of its names changes hands or records, so it must point there itself.`;
    return [{
      code: 'cname_mismatch',
      message: `${hostname} has a CNAME record pointing to ${listed(values, SHOWN_NAME_CHARS)}, but it must point to ${target}.${chain} Change the CNAME record's value to ${target}.`,
      found: shownList(values, SHOWN_NAME_CHARS),
      expected: target,
    }];
  }
  // No CNAME. An A/AAAA record at the name is what usually stops the owner from creating one.
  const [a, aaaa] = await Promise.all([
    query('A', hostname, () => resolver.resolve4(hostname)),
    query('AAAA', hostname, () => resolver.resolve6(hostname)),
  ]);
  const addresses = [...('ok' in a ? a.ok : []), ...('ok' in aaaa ? aaaa.ok : [])];
  if (addresses.length > 0) {
    return [{
      code: 'a_record_conflict',
      message: `${hostname} has no CNAME record but has address records (${listed(addresses, SHOWN_NAME_CHARS)}), and a name cannot have both. Delete those A/AAAA records and create a CNAME record for ${hostname} pointing to ${target}.`,
      found: shownList(addresses, SHOWN_NAME_CHARS),
      expected: target,
    }];
  }
  const errors = [a, aaaa].flatMap((answer) => ('error' in answer ? [answer.error] : []));
  if (errors.length > 0) return errors;
  return [{
    code: 'cname_missing',
    message: `No CNAME record for ${hostname} was found yet. Create a CNAME record for ${hostname} pointing to ${target}. ${PROPAGATION}.`,
    expected: target,
  }];
}

/** most names a CNAME chain is followed through to tell the owner it ends at the target */
const CHAIN_HOPS = 8;
/** each name of a chain shown is cut here: nine names of 255 characters would make a long message */
const CHAIN_NAME_CHARS = 100;

/**
 * The names after `first` through which a CNAME chain reaches `target` (the last being `target`), or
 * null: it does not within CHAIN_HOPS, loops, or a lookup fails. Only for the message: DESIGN asks for
 * the CNAME to name the target itself.
 */
async function chainTo(first: string, target: string, resolver: Resolver): Promise<string[] | null> {
  const seen = new Set([first]);
  const path: string[] = [];
  let name = first;
  for (let hop = 0; hop < CHAIN_HOPS; hop++) {
    const next = await query('CNAME', name, () => resolver.resolveCname(name));
    if (!('ok' in next)) return null;
    name = normalise(next.ok[0]);
    path.push(shortened(name, CHAIN_NAME_CHARS));
    if (name === target) return path;
    if (seen.has(name)) return null;
    seen.add(name);
  }
  return null;
}

// The apex cannot hold a CNAME beside its SOA/NS, so providers flatten an ALIAS/ANAME into A/AAAA
// answers; some return the CNAME itself. Either way traffic reaches us when the addresses are ours.
async function checkApex(hostname: string, target: string, resolver: Resolver): Promise<Diagnostic[]> {
  const [cname, apexA, apexAaaa, targetA, targetAaaa] = await Promise.all([
    query('CNAME', hostname, () => resolver.resolveCname(hostname)),
    query('A', hostname, () => resolver.resolve4(hostname)),
    query('AAAA', hostname, () => resolver.resolve6(hostname)),
    query('A', target, () => resolver.resolve4(target)),
    query('AAAA', target, () => resolver.resolve6(target)),
  ]);
  const cnames = 'ok' in cname ? cname.ok.map(normalise) : [];
  if (cnames.includes(target)) return [];
  const errors = [cname, apexA, apexAaaa, targetA, targetAaaa].flatMap((answer) => ('error' in answer ? [answer.error] : []));
  if (errors.length > 0) return errors;

  const apexAddresses = addressSet(apexA, apexAaaa);
  const targetAddresses = addressSet(targetA, targetAaaa);
  if (apexAddresses.length > 0 && sameSet(apexAddresses, targetAddresses)) return [];
  const ours = listed(targetAddresses, SHOWN_NAME_CHARS);
  const create = `Create an ALIAS (or ANAME) record at ${hostname} pointing to ${target}; if your DNS provider has none, create A/AAAA records for ${hostname} with ${target}'s addresses (${ours || 'none found'})`;
  if (cnames.length > 0 && apexAddresses.length === 0) {
    return [{
      code: 'cname_mismatch',
      message: `${hostname} points to ${listed(cnames, SHOWN_NAME_CHARS)}, but it must point to ${target}. ${create}.`,
      found: shownList(cnames, SHOWN_NAME_CHARS),
      expected: target,
    }];
  }
  if (apexAddresses.length === 0) {
    return [{
      code: 'cname_missing',
      message: `No record for ${hostname} was found yet. ${create}. ${PROPAGATION}.`,
      expected: target,
    }];
  }
  return [{
    code: 'apex_address_mismatch',
    message: `${hostname} resolves to ${listed(apexAddresses, SHOWN_NAME_CHARS)}, but ${target} resolves to ${ours || 'nothing'}. ${create}, and remove the other A/AAAA records at ${hostname}.`,
    found: shownList(apexAddresses, SHOWN_NAME_CHARS),
    expected: ours,
  }];
}

async function checkOwnership(hostname: string, token: string, resolver: Resolver): Promise<Diagnostic[]> {
  const name = `_portico.${hostname}`;
  const answer = await query('TXT', name, () => resolver.resolveTxt(name));
  if ('error' in answer) return [answer.error];
  // a TXT record's value may arrive split into several strings of at most 255 bytes (joined before
  // decoding: a character's bytes may straddle two of them)
  const values = 'ok' in answer ? answer.ok.map((chunks) => txtText(chunks.join('')).trim()) : [];
  if (values.includes(token)) return [];
  // what is there is quoted, bounded and printable (dns-answers.ts): it is whatever the zone holds
  return [{
    code: 'ownership_txt_missing',
    message: `${hostname} was recently attached to another account, so we need proof that you control it: create a TXT record at ${name} with the value ${token}. ${values.length > 0 ? `The TXT records found there (${listed(values, SHOWN_TXT_CHARS, true)}) do not contain it. ` : ''}${PROPAGATION}.`,
    ...(values.length > 0 ? { found: shownList(values, SHOWN_TXT_CHARS) } : {}),
    expected: token,
  }];
}

const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * A TXT value as the text its owner wrote. node:dns hands TXT bytes over one character per byte
 * (latin1), so a UTF-8 "bidi \u202eevil" read "bidi â\x80®evil": quoted that way, the bidi mark
 * is not the one printable() escapes, and anything beyond ASCII reads as mojibake. Bytes that are not
 * UTF-8 stay one character per byte (printable() escapes the controls among them).
 */
function txtText(value: string): string {
  // a resolver that decoded already (characters past one byte): nothing to do
  if (!/[\u0080-\u00ff]/u.test(value) || /[^\u0000-\u00ff]/u.test(value)) return value;
  try {
    return UTF8.decode(Buffer.from(value, 'latin1'));
  } catch {
    return value;
  }
}

function addressSet(...answers: Array<Answer<string[]>>): string[] {
  return [...new Set(answers.flatMap((answer) => ('ok' in answer ? answer.ok : [])))].sort();
}

function sameSet(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((value, i) => value === b[i]);
}
