// CAA (RFC 8659): may the CAs Portico orders from issue a certificate for a hostname, and when not,
// which record says so, where it was found and what to change. Portico proves control of a name
// with HTTP-01 only, so an `issue` property that limits its CA to other validation methods (RFC 8657
// §4) does not allow it, however plainly it names the CA.
import { publicSuffixList } from './hostname-rules.ts';
import { listed, normalise, printable, query, shortened, shownList } from './dns-answers.ts';
import type { CaaRecord, Diagnostic, Resolver } from './verifier.ts';

/** the ACME challenge Portico answers (RFC 8555 §8.3) */
export const VALIDATION_METHOD = 'http-01';

export interface CaaOptions {
  /**
   * Portico's ACME account URIs at its issuers, when known: a list, or a lookup asked only when a CAA
   * set has an `accounturi` parameter (RFC 8657 §3; the lookup may talk to the CAs, and resolves
   * undefined when it cannot). Without them such a property does not count as allowing our CA: see
   * accountAllows().
   */
  accountUris?: AccountUris;
  /** the platform's CNAME target: CAA found there is the platform's to fix, not the owner's */
  cnameTarget?: string;
}

export type AccountUris = readonly string[] | (() => Promise<readonly string[] | undefined>);

// a CNAME chain longer than this is not followed to its end (BIND stops at 16)
const MAX_ALIAS_HOPS = 8;
// the characters quoted from one CAA value: room for an account URI
const SHOWN_CAA_CHARS = 200;
// the records that name our CA, each explained in the message; the rest are in `found`
const EXPLAINED_RECORDS = 3;

// RFC 8659 §3: the relevant CAA set is the first non-empty one found climbing from the name towards
// the root (we stop below the public suffix; registries do not publish CAA for their customers).
// A CAA query follows CNAMEs like any other, so the set found "at" a name may live where its alias
// leads: the diagnostic names that place, since that is where the records can be changed.
// §4.2–4.3: a set with `issue` properties allows only the CAs named there; `issue ";"` allows none.
export async function checkCaa(hostname: string, identities: readonly string[], resolver: Resolver, options: CaaOptions = {}): Promise<Diagnostic[]> {
  const suffix = publicSuffixList().getPublicSuffix(hostname, { allowPrivateDomains: false }) ?? '';
  for (let name = hostname; name !== suffix && name.includes('.'); name = name.slice(name.indexOf('.') + 1)) {
    let unreadable = false;
    const answer = await query('CAA', name, () => resolver.resolveCaa(name).catch((err: unknown) => {
      unreadable = (err as { code?: unknown }).code === 'EBADRESP';
      throw err;
    }));
    if ('error' in answer) return [unreadable ? caaUnreadable(hostname, name, identities) : answer.error];
    if ('absent' in answer) continue;
    const properties = answer.ok.map(property);
    const verdict = judge(properties, identities, await accountUrisFor(properties, options.accountUris));
    if (verdict.allowed) return [];
    const owner = await aliasEnd(name, resolver);
    return [caaBlocks({ hostname, name, owner, records: answer.ok, verdict, identities, options })];
  }
  return [];
}

/** the account URIs, looked up only when a property could need them */
async function accountUrisFor(properties: Property[], uris: AccountUris | undefined): Promise<readonly string[] | undefined> {
  if (typeof uris !== 'function') return uris;
  if (!properties.some((p) => p.value.toLowerCase().includes('accounturi'))) return undefined;
  return uris().catch(() => undefined);
}

interface Property {
  flags: number;
  /** RFC 8659 §4.1: tags match case-insensitively */
  tag: string;
  value: string;
  shown: string;
}

// node:dns reports a property as { critical, type: 'CAA', <tag as sent>: value }
function property(record: CaaRecord): Property {
  const entry = Object.entries(record).find(([key]) => key !== 'critical' && key !== 'type');
  const tag = entry ? entry[0].toLowerCase() : '';
  const value = entry ? String(entry[1]) : '';
  return { flags: record.critical, tag, value, shown: entry ? `${record.critical} ${printable(entry[0])} "${shortened(value, SHOWN_CAA_CHARS)}"` : `${record.critical}` };
}

const KNOWN_CAA_TAGS = new Set(['issue', 'issuewild', 'iodef', 'issuemail', 'contactemail', 'contactphone']);

interface Verdict {
  allowed: boolean;
  /** why properties that name our CA (or bind every CA) do not allow it: one sentence each */
  notes: string[];
  /** one of them lists validation methods without http-01 */
  methods?: boolean;
}

function judge(properties: Property[], identities: readonly string[], accountUris: readonly string[] | undefined): Verdict {
  const ours = new Set(identities.map((identity) => identity.toLowerCase()));
  // §4.1: a property with the Issuer Critical flag (128) and a tag the CA does not understand forbids issuance
  const critical = properties.filter((p) => (p.flags & 128) !== 0 && !KNOWN_CAA_TAGS.has(p.tag));
  if (critical.length > 0) {
    return { allowed: false, notes: critical.map((p) => `The record ${p.shown} is marked critical (flag 128) with a tag CAs do not know, so every CA must refuse (RFC 8659 §4.1).`) };
  }
  const issues = properties.filter((p) => p.tag === 'issue');
  if (issues.length === 0) return { allowed: true, notes: [] };
  const notes: string[] = [];
  let methods = false;
  for (const p of issues) {
    const parsed = parseIssue(p.value);
    // an issue value that names no CA of ours (or cannot be read) simply allows someone else
    if (parsed === null || !ours.has(parsed.domain)) continue;
    if (parsed.params === null) {
      notes.push(`The record ${p.shown} names ${parsed.domain}, but its parameters do not follow the CAA syntax (${parsed.domain}; name=value; name=value, RFC 8659 §4.2), so CAs do not count it.`);
      continue;
    }
    const method = methodsAllow(parsed.params, parsed.domain);
    const refusals = [method, accountAllows(parsed.params, parsed.domain, accountUris)].filter((r) => r !== null);
    if (refusals.length === 0) return { allowed: true, notes: [] };
    methods ||= method !== null;
    notes.push(`The record ${p.shown} ${refusals.join(', and ')}.`);
  }
  return { allowed: false, notes, methods };
}

// RFC 8657 §4: `validationmethods` lists the ACME challenge types the CA may use; a list that does
// not hold http-01 (exactly: CAs compare the names as written) leaves us no way to validate.
function methodsAllow(params: Map<string, string>, domain: string): string | null {
  const value = params.get('validationmethods');
  if (value === undefined) return null;
  const methods = value.split(',');
  if (methods.includes(VALIDATION_METHOD)) return null;
  if (!methods.every((m) => /^[A-Za-z0-9-]+$/.test(m))) {
    return `has a validationmethods parameter that is not a comma-separated list of method names ("${printable(value)}"), so ${domain} refuses it (RFC 8657 §4)`;
  }
  const named = methods.join(', ');
  const hint = methods.some((m) => m.toLowerCase() === VALIDATION_METHOD) ? ` (method names are lowercase: ${VALIDATION_METHOD})` : '';
  return `restricts ${domain} to the validation method${methods.length === 1 ? '' : 's'} ${named}, but Portico validates with ${VALIDATION_METHOD}${hint}, so ${domain} would refuse every order (RFC 8657 §4)`;
}

// RFC 8657 §3: `accounturi` limits the CA to one ACME account. When Portico's own account URIs are
// known (issuing.ts asks the CAs), a property naming one of them allows us and any other does not.
// When they are not (no CA answered), the property is taken as not allowing us: counting on it would
// verify the domain and send orders the CA must refuse, each one counting against its
// failed-validation limit for the name, where refusing tells the owner at once what to change.
function accountAllows(params: Map<string, string>, domain: string, accountUris: readonly string[] | undefined): string | null {
  const uri = params.get('accounturi');
  if (uri === undefined) return null;
  if (accountUris !== undefined && accountUris.includes(uri)) return null;
  const shown = printable(uri);
  return accountUris === undefined
    ? `allows ${domain} only for the ACME account ${shown}, and Portico cannot confirm that this account is its own (its CA did not tell it its account), so it does not rely on it; check again once the CA answers`
    : `allows ${domain} only for the ACME account ${shown}, which is not Portico's account there, so ${domain} would refuse every order`;
}

interface IssueValue {
  /** lowercase; '' when the value names no CA (`;`) */
  domain: string;
  /** lowercase keys; null when the parameters do not follow the grammar */
  params: Map<string, string> | null;
}

const LDH = /^[A-Za-z0-9](?:-*[A-Za-z0-9])*$/;
const PARAMETER_VALUE = /^[\x21-\x3a\x3c-\x7e]*$/;
const trimWsp = (s: string) => s.replace(/^[ \t]+|[ \t]+$/g, '');

// RFC 8659 §4.2: issue-value = *WSP [issuer-domain-name *WSP] [";" *WSP [parameters *WSP]], with
// parameters = parameter *(*WSP ";" *WSP parameter) and parameter = tag *WSP "=" *WSP value. A value
// may not hold ";", so splitting on it is exact. Null when the issuer domain name is not a name.
function parseIssue(value: string): IssueValue | null {
  const [head, ...rest] = value.split(';');
  const domain = trimWsp(head).toLowerCase();
  if (domain !== '' && !domain.split('.').every((label) => LDH.test(label))) return null;
  if (rest.length === 0 || (rest.length === 1 && trimWsp(rest[0]) === '')) return { domain, params: new Map() };
  const params = new Map<string, string>();
  for (const part of rest) {
    const eq = part.indexOf('=');
    const key = eq === -1 ? '' : trimWsp(part.slice(0, eq));
    const val = eq === -1 ? '' : trimWsp(part.slice(eq + 1));
    if (!LDH.test(key) || !PARAMETER_VALUE.test(val)) return { domain, params: null };
    params.set(key.toLowerCase(), val);
  }
  return { domain, params };
}

/** where the CAA set found at `name` lives: the end of its CNAME chain (itself without one) */
async function aliasEnd(name: string, resolver: Resolver): Promise<string> {
  const seen = new Set([name]);
  let at = name;
  for (let hop = 0; hop < MAX_ALIAS_HOPS; hop++) {
    const answer = await query('CNAME', at, () => resolver.resolveCname(at));
    if (!('ok' in answer)) break;
    const next = normalise(answer.ok[0]);
    if (seen.has(next)) break;
    seen.add(next);
    at = next;
  }
  return at;
}

interface Blocked {
  hostname: string;
  /** the name whose CAA query answered */
  name: string;
  /** where that answer's records live (name, or the end of its CNAME chain) */
  owner: string;
  records: CaaRecord[];
  verdict: Verdict;
  identities: readonly string[];
  options: CaaOptions;
}

function caaBlocks({ hostname, name, owner, records, verdict, identities, options }: Blocked): Diagnostic {
  const identity = identities[0] ?? '';
  const needed = `0 issue "${identity}"`;
  const shown = records.map((r) => property(r).shown);
  const parent = name === hostname ? hostname : `${name} (a parent of ${hostname})`;
  const where = owner === name
    ? (name === hostname ? hostname : `${name} (a parent of ${hostname}, so they apply to it)`)
    : `${printable(owner)}, where the CNAME of ${parent} leads (CAA follows CNAMEs, so they apply to ${hostname})`;
  const target = options.cnameTarget === undefined ? null : normalise(options.cnameTarget);
  let advice: string;
  if (owner !== name && owner === target) {
    advice = `${printable(owner)} is the platform's own name, so this is ours to fix, not yours: please contact support.`;
  } else if (owner !== name) {
    const shownOwner = printable(owner);
    advice = `Those records belong to ${shownOwner}, not to your zone: once ${name} points to ${target ?? 'the platform'} they no longer apply; otherwise they must allow our certificate authority (${shownOwner} CAA ${needed}) where ${shownOwner} is managed.`;
  } else {
    advice = `Add the CAA record ${name} CAA ${needed}${verdict.methods ? ` (or add ${VALIDATION_METHOD} to that record's validationmethods)` : ''}, keeping the ones you still need.`;
  }
  // the records are printable and cut already (property().shown): only their number is bounded here
  return {
    code: 'caa_blocks_ca',
    message: [`The CAA records at ${where} do not allow our certificate authority to issue a certificate (${listed(shown, Infinity)}).`, ...verdict.notes.slice(0, EXPLAINED_RECORDS), advice].join(' '),
    found: shownList(shown, Infinity),
    expected: needed,
  };
}

/**
 * The CAA answer at `name` could not be parsed (EBADRESP). Node's resolver (c-ares) refuses a CAA
 * property with an empty value, `0 issue ""` (RFC 8659 §4.2: no CA may issue, like `issue ";"`), so
 * this is what such a record looks like from here; asking again in a few minutes, as for other DNS
 * failures, would not change it. Still `dns_error`: the records themselves could not be read.
 */
function caaUnreadable(hostname: string, name: string, identities: readonly string[]): Diagnostic {
  const needed = `0 issue "${identities[0] ?? ''}"`;
  const where = name === hostname ? hostname : `${name} (a parent of ${hostname}, so they apply to it)`;
  return {
    code: 'dns_error',
    message: `The CAA records at ${where} could not be read: the DNS answer for them is malformed (EBADRESP). A CAA record with an empty value, ${name} CAA 0 issue "", is answered this way; it allows no certificate authority. Replace it with ${name} CAA ${needed} (or remove it); otherwise look at the CAA records of ${name} with your DNS provider (dig CAA ${name}).`,
    expected: needed,
  };
}
