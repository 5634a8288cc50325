// ACME Renewal Information (RFC 9773): the CA suggests when to renew each certificate (earlier than
// planned when it must revoke). Portico asks for the window, picks a random moment in it (§4.2, so
// many certificates issued together do not renew together), asks again when the CA's Retry-After
// says, and names the certificate it replaces on the new order (§5).
import { X509Certificate } from 'node:crypto';
import https from 'node:https';
import http from 'node:http';
import { children, expect, read, INTEGER, OCTET_STRING, OID, SEQUENCE } from './der.ts';

const AUTHORITY_KEY_IDENTIFIER = Buffer.from('551d23', 'hex'); // 2.5.29.35
const EXTENSIONS = 0xa3; // [3] EXPLICIT Extensions
const KEY_IDENTIFIER = 0x80; // [0] IMPLICIT KeyIdentifier
// without a Retry-After the RFC suggests polling about twice a day (§4.3.3); never more than hourly
const DEFAULT_POLL_SECONDS = 6 * 3600;
const MIN_POLL_SECONDS = 3600;
const MAX_POLL_SECONDS = 86400;

/**
 * The ARI CertID (§4.1): base64url(authorityKeyIdentifier.keyIdentifier) "." base64url(the serial
 * number's DER contents, leading zero byte kept). Throws when the leaf has no key identifier in its
 * AKI extension, as the RFC forbids using ARI without it.
 */
export function certId(certPem: string): string {
  const buf = new X509Certificate(leafOf(certPem)).raw;
  const certificate = expect(read(buf, 0), SEQUENCE);
  const tbs = expect(children(buf, certificate)[0], SEQUENCE);
  const fields = children(buf, tbs);
  const serial = expect(fields[fields[0].tag === 0xa0 ? 1 : 0], INTEGER);
  let keyId: Buffer | null = null;
  const extensions = fields.find((f) => f.tag === EXTENSIONS);
  if (extensions) {
    for (const extension of children(buf, expect(children(buf, extensions)[0], SEQUENCE))) {
      const [oid, ...rest] = children(buf, extension);
      expect(oid, OID);
      if (!buf.subarray(oid.start, oid.end).equals(AUTHORITY_KEY_IDENTIFIER)) continue;
      const value = expect(rest[rest.length - 1], OCTET_STRING);
      const aki = expect(read(buf, value.start, value.end), SEQUENCE);
      const id = children(buf, aki).find((c) => c.tag === KEY_IDENTIFIER);
      if (id) keyId = buf.subarray(id.start, id.end);
    }
  }
  if (keyId === null) throw new Error('the certificate has no authority key identifier: ARI cannot name it');
  return `${keyId.toString('base64url')}.${buf.subarray(serial.start, serial.end).toString('base64url')}`;
}

export interface RenewalWindow {
  /** ms since the epoch */
  start: number;
  end: number;
  explanationURL?: string;
}

/** §4.2: {suggestedWindow: {start, end}, explanationURL?}; null when the answer is not that. */
export function parseRenewalInfo(body: unknown): RenewalWindow | null {
  if (typeof body !== 'object' || body === null) return null;
  const window = (body as { suggestedWindow?: { start?: unknown; end?: unknown } }).suggestedWindow;
  if (typeof window?.start !== 'string' || typeof window.end !== 'string') return null;
  const start = Date.parse(window.start);
  const end = Date.parse(window.end);
  // §4.2: a window whose end is not after its start is invalid and must be ignored
  if (Number.isNaN(start) || Number.isNaN(end) || end <= start) return null;
  const explanation = (body as { explanationURL?: unknown }).explanationURL;
  return { start, end, ...(typeof explanation === 'string' ? { explanationURL: explanation } : {}) };
}

/**
 * §4.2's algorithm: a uniformly random moment in the window; a window that has already passed
 * (the CA wants it replaced now, e.g. before a revocation) means at once.
 */
export function pickRenewalTime(window: RenewalWindow, now: number, random: () => number = Math.random): number {
  if (window.end <= now) return now;
  const start = Math.max(window.start, now);
  return Math.floor(start + random() * (window.end - start));
}

export interface RenewalInfo {
  window: RenewalWindow;
  /** when to ask again (ms since the epoch), from Retry-After, bounded to 1 h … 1 day */
  pollAt: number;
}

/** The directory's `renewalInfo` URL (§3), null when the CA offers none. */
export async function renewalInfoUrl(directoryUrl: string, agent: https.Agent | undefined): Promise<string | null> {
  const { status, body } = await get(directoryUrl, agent);
  if (status !== 200) throw new Error(`${directoryUrl} answered ${status}`);
  const directory: unknown = JSON.parse(body);
  const url = typeof directory === 'object' && directory !== null ? (directory as { renewalInfo?: unknown }).renewalInfo : undefined;
  return typeof url === 'string' ? url : null;
}

/** GET <renewalInfo>/<certID> (§4.1). Resolves null when the CA has no answer for it (404 etc.). */
export async function fetchRenewalInfo(baseUrl: string, id: string, agent: https.Agent | undefined, now: number): Promise<RenewalInfo | null> {
  const url = `${baseUrl.replace(/\/$/, '')}/${id}`;
  const { status, headers, body } = await get(url, agent);
  if (status !== 200) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return null;
  }
  const window = parseRenewalInfo(parsed);
  if (window === null) return null;
  const retryAfter = retryAfterSeconds(headers['retry-after'], now) ?? DEFAULT_POLL_SECONDS;
  return { window, pollAt: now + Math.min(MAX_POLL_SECONDS, Math.max(MIN_POLL_SECONDS, retryAfter)) * 1000 };
}

/** Retry-After is delay-seconds or an HTTP-date (RFC 9110 §10.2.3). */
export function retryAfterSeconds(header: unknown, now: number): number | undefined {
  if (typeof header !== 'string' || header === '') return undefined;
  if (/^\d+$/.test(header)) return Number(header);
  const at = Date.parse(header);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - now) / 1000));
}

function get(url: string, agent: https.Agent | undefined): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const client = url.startsWith('https:') ? https : http;
  return new Promise((resolve, reject) => {
    const request = client.get(url, { ...(agent && url.startsWith('https:') ? { agent } : {}), timeout: 30_000 }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => { body = body.length < 65536 ? body + chunk : body; });
      response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body }));
      response.on('error', reject);
    });
    request.on('timeout', () => request.destroy(new Error(`no answer from ${url} in 30 s`)));
    request.on('error', reject);
  });
}

function leafOf(certPem: string): string {
  const leaf = certPem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/)?.[0];
  if (leaf === undefined) throw new Error('no certificate in the PEM');
  return leaf;
}
