// The head of an HTTP/1.1 answer (RFC 9112 §4–6): status line and header fields, parsed from the
// text before the empty line, and what they decide: how the body is framed and whether the connection
// may carry another exchange.
// Refused (UpstreamError 'other'): not HTTP/1.0 or 1.1, a malformed status line or field, obs-fold,
// conflicting or invalid Content-Length.
import type { Framing } from './http1-body.ts';
import { UpstreamError } from './upstream-error.ts';

/** header fields in arrival order as [name, value, name, value …], names lowercased */
export type HeaderList = string[];

export interface AnswerHead {
  status: number;
  headers: HeaderList;
  /** the Connection fields' tokens, lowercased, each followed by a comma ('' when there is none) */
  connection: string;
  /** how the body ends (RFC 9112 §6.3); null: there is none */
  framing: Framing | null;
  /** the connection may carry another exchange after this one, as far as the answer says */
  keepAlive: boolean;
  /** the Keep-Alive field's `timeout` in seconds, -1 when absent */
  keepAliveTimeout: number;
}

/** `headOnly`: the answer to a HEAD request, which has no body whatever its fields say */
export function parseAnswerHead(head: string, headOnly: boolean): AnswerHead {
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
  let keepAlive = minor === 1 ? !/(?:^|[\s,])close\s*,/.test(connection) : /(?:^|[\s,])keep-alive\s*,/.test(connection);
  let framing: Framing | null;
  if (headOnly || status === 204 || status === 304) {
    framing = null;
  } else if (encoded) {
    // Transfer-Encoding wins over Content-Length; the pair smells of smuggling, so no reuse (RFC 9112 §6.3)
    if (contentLength !== -1) keepAlive = false;
    framing = chunked ? 'chunked' : 'close';
  } else if (contentLength !== -1) {
    framing = contentLength === 0 ? null : { length: contentLength };
  } else {
    framing = 'close';
  }
  if (framing === 'close') keepAlive = false;
  const timeout = keepAliveHint === '' ? null : /timeout\s*=\s*(\d+)/i.exec(keepAliveHint);
  return { status, headers, connection, framing, keepAlive, keepAliveTimeout: timeout ? Number(timeout[1]) : -1 };
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
