// OCSP stapling (TLS "status_request", RFC 6066 §8; OCSP, RFC 6960) for certificates that name a
// responder. Node asks through the server's 'OCSPRequest' event on every handshake whose client
// wants a staple. The order, in onRequest:
//   1. no issuer, or a certificate we cannot read → no staple;
//   2. a cached staple that has not expired → staple it;
//   3. nothing cached, or due for refresh (or for a retry after a failure) → start ONE background
//      fetch for that certificate, if it names a responder; the handshake never waits for it.
// Node destroys the socket when the callback gets an error, so every outcome here is "staple or
// not", and failures go to onError.
import { createHash, X509Certificate } from 'node:crypto';
import { INTEGER, BIT_STRING, OCTET_STRING, OID, ENUMERATED, GENERALIZED_TIME, SEQUENCE, SHA1_ALGORITHM, ID_PKIX_OCSP_BASIC, read, children, expect, tlvBytes, der, type Tlv } from './der.ts';

export interface OcspStapler {
  onRequest(certificate: Buffer, issuer: Buffer | null, done: (err: Error | null, response?: Buffer | null) => void): void;
  /** entries held: staples, remembered failures and certificates that name no responder */
  size(): number;
}

export interface OcspStaplerOptions {
  timeoutMs?: number;
  now?: () => number;
  fetch?: typeof fetch;
  maxEntries?: number;
  onError?(err: unknown): void;
}

export type OcspErrorCode = 'OCSP_HTTP_STATUS' | 'OCSP_UNSUCCESSFUL' | 'OCSP_MALFORMED' | 'OCSP_WRONG_CERTIFICATE' | 'OCSP_EXPIRED' | 'OCSP_FETCH';

export class OcspError extends Error {
  readonly code: OcspErrorCode;
  constructor(code: OcspErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'OcspError';
    this.code = code;
  }
}

const RETRY_MS = 5 * 60_000;
// when the response carries no nextUpdate (RFC 6960 §2.4: "newer information is always available")
const NO_NEXT_UPDATE_MS = 60 * 60_000;
const MAX_RESPONSE_BYTES = 64 * 1024;
// RFC 6960 §2.3
const STATUS_NAMES = ['successful', 'malformedRequest', 'internalError', 'tryLater', '(unused)', 'sigRequired', 'unauthorized'];

interface Entry {
  /** served while now < expiresAt */
  staple: Buffer | null;
  expiresAt: number;
  /** when the next fetch may start; Infinity for a certificate that names no responder */
  refreshAt: number;
}

export function createOcspStapler(options: OcspStaplerOptions = {}): OcspStapler {
  const timeoutMs = options.timeoutMs ?? 5_000;
  const now = options.now ?? Date.now;
  const fetchFn = options.fetch ?? fetch;
  const maxEntries = options.maxEntries ?? 10_000;
  // a throwing onError must not take the listener down (refresh() runs unawaited)
  const report = (err: unknown) => { try { options.onError?.(err); } catch {} };
  const cache = new Map<string, Entry>();
  const inFlight = new Set<string>();

  function remember(key: string, entry: Entry): void {
    cache.delete(key);
    cache.set(key, entry);
    // Maps iterate in insertion order: the first key is the one written longest ago
    if (cache.size > maxEntries) cache.delete(cache.keys().next().value!);
  }

  async function refresh(key: string, url: string, request: Buffer, serial: Buffer): Promise<void> {
    try {
      const staple = await post(fetchFn, url, request, timeoutMs);
      remember(key, { staple, ...freshness(staple, serial, now()) });
    } catch (err) {
      // keep a staple that has not expired yet; ask again no sooner than RETRY_MS
      const previous = cache.get(key);
      remember(key, { staple: previous?.staple ?? null, expiresAt: previous?.expiresAt ?? 0, refreshAt: now() + RETRY_MS });
      report(err);
    } finally {
      inFlight.delete(key);
    }
  }

  // an arrow function: Node emits 'OCSPRequest' with the server as `this`
  const onRequest: OcspStapler['onRequest'] = (certificate, issuer, done) => {
    if (!issuer) return done(null, null);
    let staple: Buffer | null = null;
    try {
      const { certId, serial } = readCertId(certificate, issuer);
      const key = certId.toString('hex');
      const entry = cache.get(key);
      const at = now();
      if (entry?.staple && at < entry.expiresAt) staple = entry.staple;
      if ((!entry || at >= entry.refreshAt) && !inFlight.has(key)) {
        const url = responderUrl(certificate);
        if (url === null) {
          remember(key, { staple: null, expiresAt: 0, refreshAt: Infinity });
        } else {
          inFlight.add(key);
          void refresh(key, url, ocspRequestFor(certId), serial);
        }
      }
    } catch (err) {
      report(err);
    }
    done(null, staple);
  };

  return { onRequest, size: () => cache.size };
}

/** The DER OCSPRequest for one certificate, without a nonce (the answer is shared by every handshake). */
export function ocspRequestDer(certificate: Buffer, issuer: Buffer): Buffer {
  return ocspRequestFor(readCertId(certificate, issuer).certId);
}

/** The first OCSP responder in the certificate's Authority Information Access extension, or null. */
export function responderUrl(certificate: Buffer): string | null {
  const infoAccess = new X509Certificate(certificate).infoAccess ?? '';
  for (const line of infoAccess.split('\n')) {
    if (!line.startsWith('OCSP - URI:')) continue;
    let value = line.slice('OCSP - URI:'.length);
    // Node JSON-quotes a value holding characters that would make the text ambiguous
    if (value.startsWith('"')) value = JSON.parse(value) as string;
    const url = URL.parse(value);
    if (url && (url.protocol === 'http:' || url.protocol === 'https:')) return url.href;
  }
  return null;
}

// RFC 6960 §4.1.1:
//   OCSPRequest ::= SEQUENCE { tbsRequest TBSRequest, optionalSignature [0] EXPLICIT OPTIONAL }
//   TBSRequest  ::= SEQUENCE { version [0] EXPLICIT DEFAULT v1, requestorName [1] OPTIONAL,
//                              requestList SEQUENCE OF Request, requestExtensions [2] OPTIONAL }
//   Request     ::= SEQUENCE { reqCert CertID, singleRequestExtensions [0] OPTIONAL }
// Defaults are omitted (DER), and none of the optional fields is sent.
function ocspRequestFor(certId: Buffer): Buffer {
  return der(SEQUENCE, der(SEQUENCE, der(SEQUENCE, der(SEQUENCE, certId))));
}

// RFC 6960 §4.1.1: CertID ::= SEQUENCE { hashAlgorithm AlgorithmIdentifier, issuerNameHash OCTET STRING,
//                                         issuerKeyHash OCTET STRING, serialNumber CertificateSerialNumber }
// SHA-1, as RFC 5019 §2.1.1 requires of clients of the lightweight profile most CAs run. The name
// hash is over the issuer's subject Name DER, the key hash over its subjectPublicKey BIT STRING
// contents without the unused-bits byte.
function readCertId(certificate: Buffer, issuer: Buffer): { certId: Buffer; serial: Buffer } {
  const leaf = tbsFields(certificate);
  const ca = tbsFields(issuer);
  const subject = ca[4];
  const bits = expect(children(issuer, expect(ca[5], SEQUENCE))[1], BIT_STRING);
  const serial = tlvBytes(certificate, expect(leaf[0], INTEGER));
  const sha1 = (bytes: Buffer) => createHash('sha1').update(bytes).digest();
  const certId = der(
    SEQUENCE,
    SHA1_ALGORITHM,
    der(OCTET_STRING, sha1(tlvBytes(issuer, expect(subject, SEQUENCE)))),
    der(OCTET_STRING, sha1(issuer.subarray(bits.start + 1, bits.end))),
    serial,
  );
  return { certId, serial };
}

/** tbsCertificate's fields after the optional version: serial, signature, issuer, validity, subject, spki, … */
function tbsFields(certificate: Buffer): Tlv[] {
  const tbs = children(certificate, expect(children(certificate, expect(read(certificate, 0), SEQUENCE))[0], SEQUENCE));
  const fields = tbs[0]?.tag === 0xa0 ? tbs.slice(1) : tbs;
  if (fields.length < 6) throw new OcspError('OCSP_MALFORMED', 'certificate: too few tbsCertificate fields');
  return fields;
}

async function post(fetchFn: typeof fetch, url: string, request: Buffer, timeoutMs: number): Promise<Buffer> {
  const signal = AbortSignal.timeout(timeoutMs);
  let body: Buffer;
  try {
    const res = await fetchFn(url, { method: 'POST', headers: { 'content-type': 'application/ocsp-request', accept: 'application/ocsp-response' }, body: request, signal });
    if (res.status !== 200) {
      await res.body?.cancel();
      throw new OcspError('OCSP_HTTP_STATUS', `OCSP responder ${url} answered HTTP ${res.status}`);
    }
    body = await readCapped(res, MAX_RESPONSE_BYTES);
  } catch (err) {
    if (err instanceof OcspError) throw err;
    const reason = signal.aborted ? `did not answer within ${timeoutMs} ms` : 'could not be reached';
    throw new OcspError('OCSP_FETCH', `OCSP responder ${url} ${reason}`, { cause: err });
  }
  const status = responseStatus(body);
  if (status !== 0) throw new OcspError('OCSP_UNSUCCESSFUL', `OCSP responder ${url} answered ${STATUS_NAMES[status] ?? status}`);
  return body;
}

async function readCapped(res: Response, limit: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let length = 0;
  for await (const chunk of res.body ?? []) {
    length += chunk.byteLength;
    if (length > limit) throw new OcspError('OCSP_MALFORMED', `OCSP response larger than ${limit} bytes`);
    parts.push(Buffer.from(chunk));
  }
  return Buffer.concat(parts);
}

// OCSPResponse ::= SEQUENCE { responseStatus ENUMERATED, responseBytes [0] EXPLICIT ResponseBytes OPTIONAL }
// ResponseBytes ::= SEQUENCE { responseType OBJECT IDENTIFIER, response OCTET STRING }
function responseStatus(response: Buffer): number {
  const top = read(response, 0);
  if (top.end !== response.length) throw new OcspError('OCSP_MALFORMED', 'OCSP response: trailing bytes');
  const fields = children(response, expect(top, SEQUENCE));
  const status = expect(fields[0], ENUMERATED);
  if (status.end - status.start !== 1) throw new OcspError('OCSP_MALFORMED', 'OCSP response: responseStatus');
  if (response[status.start] === 0 && fields[1]?.tag !== 0xa0) throw new OcspError('OCSP_MALFORMED', 'OCSP response: successful without responseBytes');
  return response[status.start];
}

/**
 * How long a staple may be served and when to fetch the next one. For a BasicOCSPResponse: refresh
 * halfway between thisUpdate and nextUpdate (certmagic does the same), never serve it past
 * nextUpdate. Other response types, or no nextUpdate: one hour.
 */
function freshness(response: Buffer, serial: Buffer, at: number): { expiresAt: number; refreshAt: number } {
  const single = basicSingleResponse(response, serial);
  if (!single || single.nextUpdate === null) return { expiresAt: at + NO_NEXT_UPDATE_MS, refreshAt: at + NO_NEXT_UPDATE_MS };
  if (single.nextUpdate <= at) throw new OcspError('OCSP_EXPIRED', 'OCSP response: nextUpdate has passed');
  const halfway = single.thisUpdate + (single.nextUpdate - single.thisUpdate) / 2;
  // at least RETRY_MS between fetches, but never past the staple's end
  return { expiresAt: single.nextUpdate, refreshAt: Math.min(single.nextUpdate, Math.max(halfway, at + RETRY_MS)) };
}

// BasicOCSPResponse ::= SEQUENCE { tbsResponseData ResponseData, signatureAlgorithm, signature, certs [0] OPTIONAL }
// ResponseData ::= SEQUENCE { version [0] EXPLICIT DEFAULT v1, responderID ResponderID (CHOICE [1] | [2]),
//                             producedAt GeneralizedTime, responses SEQUENCE OF SingleResponse, responseExtensions [1] OPTIONAL }
// SingleResponse ::= SEQUENCE { certID CertID, certStatus CertStatus, thisUpdate GeneralizedTime,
//                               nextUpdate [0] EXPLICIT GeneralizedTime OPTIONAL, singleExtensions [1] OPTIONAL }
// (RFC 6960 §4.2.1). Null for another response type; throws when a basic response is unreadable or
// does not speak of this certificate: stapling it would only make clients fail.
function basicSingleResponse(response: Buffer, serial: Buffer): { thisUpdate: number; nextUpdate: number | null } | null {
  const explicit = children(response, read(response, 0))[1]; // responseBytes [0], checked by responseStatus()
  const responseBytes = children(response, expect(children(response, explicit)[0], SEQUENCE));
  if (!tlvBytes(response, expect(responseBytes[0], OID)).equals(ID_PKIX_OCSP_BASIC)) return null;
  const octets = expect(responseBytes[1], OCTET_STRING);
  const basic = response.subarray(octets.start, octets.end);
  const data = children(basic, expect(children(basic, expect(read(basic, 0), SEQUENCE))[0], SEQUENCE));
  const fields = data[0]?.tag === 0xa0 ? data.slice(1) : data;
  for (const single of children(basic, expect(fields[2], SEQUENCE))) {
    const [certId, , thisUpdate, next] = children(basic, expect(single, SEQUENCE));
    const certSerial = children(basic, expect(certId, SEQUENCE))[3];
    if (!tlvBytes(basic, expect(certSerial, INTEGER)).equals(serial)) continue;
    const nextUpdate = next?.tag === 0xa0 ? generalizedTime(basic, children(basic, next)[0]) : null;
    return { thisUpdate: generalizedTime(basic, thisUpdate), nextUpdate };
  }
  throw new OcspError('OCSP_WRONG_CERTIFICATE', 'OCSP response does not cover this certificate');
}

function generalizedTime(buf: Buffer, tlv: Tlv | undefined): number {
  const text = buf.subarray(expect(tlv, GENERALIZED_TIME).start, tlv!.end).toString('latin1');
  const m = /^(\d{4})(\d\d)(\d\d)(\d\d)(\d\d)(\d\d)(\.\d+)?Z$/.exec(text);
  if (!m) throw new OcspError('OCSP_MALFORMED', `OCSP response: GeneralizedTime ${JSON.stringify(text)}`);
  return Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6], m[7] ? Math.floor(Number(m[7]) * 1000) : 0);
}
