// DER, just enough of it for OCSP (X.690 §8.1: tag, length, contents; definite lengths only).
// Malformed input throws OcspError with code OCSP_MALFORMED.
import { OcspError } from './ocsp.ts';

export const INTEGER = 0x02, BIT_STRING = 0x03, OCTET_STRING = 0x04, OID = 0x06, ENUMERATED = 0x0a, GENERALIZED_TIME = 0x18, SEQUENCE = 0x30;
// AlgorithmIdentifier { id-sha1 (1.3.14.3.2.26), NULL }
export const SHA1_ALGORITHM = Buffer.from('300906052b0e03021a0500', 'hex');
// id-pkix-ocsp-basic (1.3.6.1.5.5.7.48.1.1)
export const ID_PKIX_OCSP_BASIC = Buffer.from('06092b0601050507300101', 'hex');

export interface Tlv {
  tag: number;
  /** where the TLV starts */
  offset: number;
  /** contents */
  start: number;
  end: number;
}

export function read(buf: Buffer, offset: number, limit = buf.length): Tlv {
  const fail = (): never => { throw new OcspError('OCSP_MALFORMED', `DER: truncated or invalid at byte ${offset}`); };
  if (offset + 2 > limit) fail();
  const tag = buf[offset];
  if ((tag & 0x1f) === 0x1f) fail(); // multi-byte tags: none in these structures
  let length = buf[offset + 1];
  let start = offset + 2;
  if (length & 0x80) {
    const count = length & 0x7f;
    if (count === 0 || count > 4 || start + count > limit) fail();
    length = 0;
    for (let i = 0; i < count; i++) length = length * 256 + buf[start + i];
    start += count;
  }
  if (start + length > limit) fail();
  return { tag, offset, start, end: start + length };
}

export function children(buf: Buffer, parent: Tlv): Tlv[] {
  if (!(parent.tag & 0x20)) throw new OcspError('OCSP_MALFORMED', `DER: tag 0x${parent.tag.toString(16)} is not constructed`);
  const out: Tlv[] = [];
  for (let at = parent.start; at < parent.end; at = out[out.length - 1].end) out.push(read(buf, at, parent.end));
  return out;
}

export function expect(tlv: Tlv | undefined, tag: number): Tlv {
  if (tlv?.tag !== tag) throw new OcspError('OCSP_MALFORMED', `DER: expected tag 0x${tag.toString(16)}, got ${tlv ? '0x' + tlv.tag.toString(16) : 'nothing'}`);
  return tlv;
}

export function tlvBytes(buf: Buffer, tlv: Tlv): Buffer {
  return buf.subarray(tlv.offset, tlv.end);
}

export function der(tag: number, ...contents: Buffer[]): Buffer {
  const body = Buffer.concat(contents);
  const n = body.length;
  const length = n < 0x80 ? [n] : n < 0x100 ? [0x81, n] : n < 0x10000 ? [0x82, n >> 8, n & 0xff] : [0x83, n >> 16, (n >> 8) & 0xff, n & 0xff];
  return Buffer.concat([Buffer.from([tag, ...length]), body]);
}
