// The head of an HTTP/1.1 answer (RFC 9112 §4–6): status line and header fields, parsed from the
// text before the empty line, with what the client needs to frame the body and to decide on reuse.
// Refused (UpstreamError 'other'): not HTTP/1.0 or 1.1, a malformed status line or field, obs-fold,
// conflicting or invalid Content-Length.
import { UpstreamError } from './upstream-error.ts';

/** header fields in arrival order as [name, value, name, value …], names lowercased */
export type HeaderList = string[];

export interface AnswerHead {
  status: number;
  /** 0 or 1 */
  minor: number;
  headers: HeaderList;
  /** -1 when absent */
  contentLength: number;
  /** Transfer-Encoding present; `chunked` when it ends with chunked */
  encoded: boolean;
  chunked: boolean;
  /** the Connection fields' tokens, lowercased, each followed by a comma ('' when there is none) */
  connection: string;
  /** the Keep-Alive field's value ('' when there is none) */
  keepAliveHint: string;
}

export function parseAnswerHead(head: string): AnswerHead {
  const lineEnd = head.indexOf('\r\n');
  const statusLine = lineEnd === -1 ? head : head.slice(0, lineEnd);
  if (statusLine.length < 12 || !statusLine.startsWith('HTTP/1.') || statusLine.charCodeAt(8) !== 32 || (statusLine.length > 12 && statusLine.charCodeAt(12) !== 32)) {
    throw new UpstreamError('other', 'the upstream did not answer with HTTP/1.x');
  }
  const minor = statusLine.charCodeAt(7) - 48;
  const status = Number(statusLine.slice(9, 12));
  if ((minor !== 0 && minor !== 1) || !Number.isInteger(status) || status < 100) throw new UpstreamError('other', 'the upstream sent a malformed status line');
  const headers: HeaderList = [];
  let contentLength = -1;
  let chunked = false;
  let encoded = false;
  let connection = '';
  let keepAliveHint = '';
  let at = lineEnd === -1 ? head.length : lineEnd + 2;
  while (at < head.length) {
    let next = head.indexOf('\r\n', at);
    if (next === -1) next = head.length;
    const first = head.charCodeAt(at);
    if (first === 32 || first === 9) throw new UpstreamError('other', 'the upstream used obsolete line folding');
    const colon = head.indexOf(':', at);
    if (colon === -1 || colon >= next || colon === at) throw new UpstreamError('other', 'the upstream sent a malformed header');
    const name = lowerName(head.slice(at, colon));
    const value = head.slice(colon + 1, next).trim();
    at = next + 2;
    headers.push(name, value);
    if (name.length < 10 || name.length > 17) continue;
    if (name === 'content-length') {
      const n = /^\d{1,15}$/.test(value) ? Number(value) : NaN;
      if (Number.isNaN(n) || (contentLength !== -1 && contentLength !== n)) throw new UpstreamError('other', 'the upstream sent an invalid Content-Length');
      contentLength = n;
    } else if (name === 'transfer-encoding') {
      encoded = true;
      chunked = /(?:^|,)\s*chunked\s*$/i.test(value);
    } else if (name === 'connection') {
      connection += `${value.toLowerCase()},`;
    } else if (name === 'keep-alive') {
      keepAliveHint = value;
    }
  }
  return { status, minor, headers, contentLength, encoded, chunked, connection, keepAliveHint };
}

// header names as the upstream spelled them → lowercased: the same few arrive again and again
const lowerNames = new Map<string, string>();
function lowerName(name: string): string {
  let lower = lowerNames.get(name);
  if (lower === undefined) {
    lower = name.toLowerCase();
    if (lowerNames.size >= 2_000) lowerNames.clear();
    lowerNames.set(name, lower);
  }
  return lower;
}
