// DNS verification of a domain (DESIGN §6): does it point at us, may our CA issue for it, and (when a
// takeover guard applies) does the owner hold its zone. Every finding is returned, each with a
// stable code and a message that says what to do. The resolver is injected; this never runs inside
// a TLS handshake.
import { Resolver as DnsResolver } from 'node:dns/promises';
import { publicSuffixList } from './hostname-rules.ts';

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
    checkCaa(hostname, input.caaIdentities, resolver),
    input.ownershipToken === undefined ? [] : checkOwnership(hostname, input.ownershipToken, resolver),
  ]);
  const diagnostics = found.flat();
  return {
    verified: diagnostics.length === 0,
    pending: diagnostics.length > 0 && diagnostics.every((d) => MAYBE_NOT_PROPAGATED.has(d.code)),
    diagnostics,
  };
}

type Answer<T> = { ok: T } | { absent: true } | { error: Diagnostic };

// NXDOMAIN and NODATA are answers ("nothing there"); anything else means we could not find out.
async function query<T>(what: string, name: string, run: () => Promise<T[]>): Promise<Answer<T[]>> {
  try {
    const records = await run();
    return records.length === 0 ? { absent: true } : { ok: records };
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'ENOTFOUND' || code === 'ENODATA') return { absent: true };
    const reason = code === 'ETIMEOUT' ? 'timed out' : code === 'ESERVFAIL' ? 'failed (SERVFAIL)' : `failed (${String(code ?? err)})`;
    return { error: { code: 'dns_error', message: `The DNS query for the ${what} record of ${name} ${reason}. This is usually temporary at the DNS provider: verify again in a few minutes.` } };
  }
}

async function checkSubdomain(hostname: string, target: string, resolver: Resolver): Promise<Diagnostic[]> {
  const cname = await query('CNAME', hostname, () => resolver.resolveCname(hostname));
  if ('error' in cname) return [cname.error];
  if ('ok' in cname) {
    const values = cname.ok.map(normalise);
    if (values.includes(target)) return [];
    return [{
      code: 'cname_mismatch',
      message: `${hostname} has a CNAME record pointing to ${values.join(', ')}, but it must point to ${target}. Change the CNAME record's value to ${target}.`,
      found: values,
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
      message: `${hostname} has no CNAME record but has address records (${addresses.join(', ')}), and a name cannot have both. Delete those A/AAAA records and create a CNAME record for ${hostname} pointing to ${target}.`,
      found: addresses,
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
  const create = `Create an ALIAS (or ANAME) record at ${hostname} pointing to ${target}; if your DNS provider has none, create A/AAAA records for ${hostname} with ${target}'s addresses (${targetAddresses.join(', ') || 'none found'})`;
  if (cnames.length > 0 && apexAddresses.length === 0) {
    return [{
      code: 'cname_mismatch',
      message: `${hostname} points to ${cnames.join(', ')}, but it must point to ${target}. ${create}.`,
      found: cnames,
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
    message: `${hostname} resolves to ${apexAddresses.join(', ')}, but ${target} resolves to ${targetAddresses.join(', ') || 'nothing'}. ${create}, and remove the other A/AAAA records at ${hostname}.`,
    found: apexAddresses,
    expected: targetAddresses.join(', '),
  }];
}

// RFC 8659 §3: the relevant CAA set is the first non-empty one found climbing from the name towards
// the root (we stop below the public suffix; registries do not publish CAA for their customers).
// §4.2–4.3: a set with `issue` properties allows only the CAs named there; `issue ";"` allows none.
export async function checkCaa(hostname: string, identities: readonly string[], resolver: Resolver): Promise<Diagnostic[]> {
  const suffix = publicSuffixList().getPublicSuffix(hostname, { allowPrivateDomains: false }) ?? '';
  for (let name = hostname; name !== suffix && name.includes('.'); name = name.slice(name.indexOf('.') + 1)) {
    const answer = await query('CAA', name, () => resolver.resolveCaa(name));
    if ('error' in answer) return [answer.error];
    if ('absent' in answer) continue;
    return caaAllows(answer.ok, identities) ? [] : [caaBlocks(hostname, name, answer.ok, identities)];
  }
  return [];
}

function caaAllows(records: CaaRecord[], identities: readonly string[]): boolean {
  const ours = new Set(identities.map((identity) => identity.toLowerCase()));
  // §4.1: a property with the Issuer Critical flag (128) and a tag the CA does not understand forbids issuance
  if (records.some((r) => (r.critical & 128) !== 0 && !isKnownCaaTag(r))) return false;
  const issuers = records.flatMap((r) => (r.issue === undefined ? [] : [issuerDomain(r.issue)]));
  if (issuers.length === 0) return true;
  return issuers.some((issuer) => issuer !== '' && ours.has(issuer));
}

function caaBlocks(hostname: string, at: string, records: CaaRecord[], identities: readonly string[]): Diagnostic {
  const needed = `0 issue "${identities[0] ?? ''}"`;
  const shown = records.map(describeCaa);
  const where = at === hostname ? hostname : `${at} (a parent of ${hostname}, so it applies to it)`;
  return {
    code: 'caa_blocks_ca',
    message: `The CAA records at ${where} do not allow our certificate authority to issue a certificate (${shown.join('; ')}). Add the CAA record ${at} CAA ${needed}, keeping the ones you still need.`,
    found: shown,
    expected: needed,
  };
}

function issuerDomain(value: string): string {
  const semicolon = value.indexOf(';');
  return (semicolon === -1 ? value : value.slice(0, semicolon)).trim().toLowerCase();
}

// node:dns reports a property as { critical, <tag>: value }
const KNOWN_CAA_TAGS = new Set(['issue', 'issuewild', 'iodef', 'issuemail', 'contactemail', 'contactphone']);

function isKnownCaaTag(record: CaaRecord): boolean {
  return Object.keys(record).some((key) => KNOWN_CAA_TAGS.has(key));
}

function describeCaa(record: CaaRecord): string {
  const entry = Object.entries(record).find(([key]) => key !== 'critical' && key !== 'type');
  return entry ? `${record.critical} ${entry[0]} "${String(entry[1])}"` : `${record.critical}`;
}

async function checkOwnership(hostname: string, token: string, resolver: Resolver): Promise<Diagnostic[]> {
  const name = `_portico.${hostname}`;
  const answer = await query('TXT', name, () => resolver.resolveTxt(name));
  if ('error' in answer) return [answer.error];
  // a TXT record's value may arrive split into several strings of at most 255 bytes
  const values = 'ok' in answer ? answer.ok.map((chunks) => chunks.join('').trim()) : [];
  if (values.includes(token)) return [];
  return [{
    code: 'ownership_txt_missing',
    message: `${hostname} was recently attached to another account, so we need proof that you control it: create a TXT record at ${name} with the value ${token}. ${values.length > 0 ? `The TXT records found there (${values.join(', ')}) do not contain it. ` : ''}${PROPAGATION}.`,
    ...(values.length > 0 ? { found: values } : {}),
    expected: token,
  }];
}

function addressSet(...answers: Array<Answer<string[]>>): string[] {
  return [...new Set(answers.flatMap((answer) => ('ok' in answer ? answer.ok : [])))].sort();
}

function sameSet(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((value, i) => value === b[i]);
}

function normalise(name: string): string {
  const lower = name.trim().toLowerCase();
  return lower.endsWith('.') ? lower.slice(0, -1) : lower;
}
