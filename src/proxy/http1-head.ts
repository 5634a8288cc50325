// The head of an HTTP/1.1 answer (RFC 9112 §4–6): status line and header fields, parsed from the
// text before the empty line, and what they decide: how the body is framed and whether the connection
// may carry another exchange.
//
// Upstream answers are untrusted input (each owner runs their own upstream), so the head is held to
// llhttp's strict grammar, checked against it on generated input (test/proxy/llhttp-differential):
// - status line `HTTP/1.0` or `HTTP/1.1`, one space, three digits (100–999), then nothing or a space
//   and any reason phrase without CR or LF;
// - every line ends in CRLF; a field is a token name, a colon, and a value of HTAB, SP, VCHAR and
//   obs-text only (no NUL, no other control byte, no bare CR or LF), its leading and trailing SP/HTAB
//   dropped; no obs-fold (a line starting with whitespace);
// - Content-Length is digits, given once; Transfer-Encoding is never empty and never comes with a
//   Content-Length (RFC 9112 §6.1: "ought to be handled as an error"; that pair is how a response is
//   split).
// Stricter than llhttp, on purpose: a Transfer-Encoding other than `chunked` alone and last (llhttp
// reads such a body to the close and leaves its coding on it, which a visitor could not undo once the
// field is dropped), another HTTP version or protocol (llhttp takes HTTP/0.9, HTTP/2.0, RTSP/1.0 and
// ICY), a status below 100, and empty lines before the status line (llhttp skips them; here they are
// bytes beyond the previous answer, or an upstream that is not speaking HTTP/1.1).
// A head still arriving is refused as soon as its bytes cannot become a valid one (checkPartialHead):
// a bare CR or LF, or a start no status line has, as llhttp refuses them before the head is complete.
// Everything refused is an UpstreamError 'invalid_response': the visitor gets a 502.
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
  /**
   * the Content-Length to announce to the visitor, from what Portico will forward: the body's length;
   * for HEAD the length the upstream declared (of the GET's body); -1: none (chunked, to the close,
   * 1xx, 204, 304). Never the upstream's field copied through.
   */
  length: number;
  /** the connection may carry another exchange after this one, as far as the answer says */
  keepAlive: boolean;
  /** the Keep-Alive field's `timeout` in seconds, -1 when absent */
  keepAliveTimeout: number;
}

// RFC 9110 §5.6.2 token; §5.5 field-value (HTAB, SP, VCHAR, obs-text), every line ended by CRLF.
// One pass over all the field lines, so the per-line work below only splits.
const FIELD_LINES = /^(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*(?:\r\n|$))*$/;
const STATUS_LINE = /^HTTP\/1\.[01] [1-9]\d\d(?: [^\r\n]*)?$/;
// What STATUS_LINE asks of a status line's first 13 bytes: `HTTP/1.0` or `HTTP/1.1`, SP, a digit 1–9,
// two digits, then SP (a reason phrase follows) or the CR of the line's end. Past them only the
// reason phrase, `[^\r\n]*`, which the bare CR/LF checks cover: a head whose first 13 bytes pass here
// has a valid status line once its CRLF comes, and one that does not pass never will.
const STATUS_START = Buffer.from('HTTP/1.');
const STATUS_START_LENGTH = 13;
const DIGITS = /^\d{1,15}$/;

/** `headOnly`: the answer to a HEAD request, which has no body whatever its fields say */
export function parseAnswerHead(head: string, headOnly: boolean): AnswerHead {
  const lineEnd = head.indexOf('\r\n');
  const statusLine = lineEnd === -1 ? head : head.slice(0, lineEnd);
  if (!STATUS_LINE.test(statusLine)) throw invalid('the upstream sent a malformed status line');
  const minor = statusLine.charCodeAt(7) - 48;
  const status = Number(statusLine.slice(9, 12));
  if (lineEnd !== -1 && !FIELD_LINES.test(head.slice(lineEnd + 2))) throw invalid('the upstream sent a malformed header field');
  const headers: HeaderList = [];
  let contentLength = -1;
  let codings = '';
  let encoded = false;
  let connection = '';
  let keepAliveHint = '';
  let at = lineEnd === -1 ? head.length : lineEnd + 2;
  while (at < head.length) {
    let next = head.indexOf('\r\n', at);
    if (next === -1) next = head.length;
    const colon = head.indexOf(':', at);
    const name = lowerName(head.slice(at, colon));
    const value = trimOws(head, colon + 1, next);
    at = next + 2;
    headers.push(name, value);
    if (name.length < 10 || name.length > 17) continue;
    if (name === 'content-length') {
      // llhttp refuses a second one even when equal (RFC 9112 §6.3 allows folding them; it is rare)
      if (contentLength !== -1 || !DIGITS.test(value)) throw invalid('the upstream sent an invalid Content-Length');
      contentLength = Number(value);
    } else if (name === 'transfer-encoding') {
      if (value === '') throw invalid('the upstream sent an empty Transfer-Encoding');
      encoded = true;
      codings += `${value},`;
    } else if (name === 'connection') {
      connection += `${value.toLowerCase()},`;
    } else if (name === 'keep-alive') {
      keepAliveHint = value;
    }
  }
  if (encoded && contentLength !== -1) throw invalid('the upstream sent both Content-Length and Transfer-Encoding');
  if (encoded && !onlyChunked(codings)) throw invalid('the upstream sent a Transfer-Encoding other than chunked');
  let keepAlive = minor === 1 ? !/(?:^|[\s,])close\s*,/.test(connection) : /(?:^|[\s,])keep-alive\s*,/.test(connection);
  let framing: Framing | null;
  if (headOnly || status === 204 || status === 304 || status < 200) framing = null;
  else if (encoded) framing = 'chunked';
  else if (contentLength !== -1) framing = contentLength === 0 ? null : { length: contentLength };
  else framing = 'close';
  if (framing === 'close') keepAlive = false;
  let length = -1;
  if (headOnly) length = contentLength;
  else if (framing === null) length = status >= 200 && status !== 204 && status !== 304 ? 0 : -1;
  else if (typeof framing === 'object') length = framing.length;
  const timeout = keepAliveHint === '' ? null : /timeout\s*=\s*(\d+)/i.exec(keepAliveHint);
  return { status, headers, connection, framing, length, keepAlive, keepAliveTimeout: timeout ? Number(timeout[1]) : -1 };
}

/**
 * A head still arriving (bytes from `from` not yet checked) that can already be refused: a bare LF or CR ends no line here, so waiting for
 * the CRLF CRLF that ends a head would hold the visitor until the upstream timeout for nothing. So does a
 * start no status line has (`SSH-2.0-…`, `hello`, `HTTP/1.1 OK 200`): llhttp refuses those at once too.
 */
export function checkPartialHead(data: Buffer, from: number): void {
  if (from < STATUS_START_LENGTH) checkStatusStart(data, from);
  let at = data.indexOf(10, from);
  while (at !== -1) {
    if (at === 0 || data[at - 1] !== 13) throw invalid('the upstream ended a line with a bare LF');
    at = data.indexOf(10, at + 1);
  }
  at = data.indexOf(13, from);
  while (at !== -1 && at < data.length - 1) {
    if (data[at + 1] !== 10) throw invalid('the upstream sent a bare CR');
    at = data.indexOf(13, at + 1);
  }
}

/** the status line's start, bytes [from, 13) of it (those before `from` passed already) */
function checkStatusStart(data: Buffer, from: number): void {
  const end = Math.min(data.length, STATUS_START_LENGTH);
  for (let i = from; i < end; i++) {
    const c = data[i];
    let ok: boolean;
    if (i < 7) ok = c === STATUS_START[i];
    else if (i === 7) ok = c === 48 || c === 49;
    else if (i === 8) ok = c === 32;
    else if (i === 9) ok = c >= 49 && c <= 57;
    else if (i < 12) ok = c >= 48 && c <= 57;
    else ok = c === 32 || c === 13;
    if (!ok) throw invalid('the upstream sent a malformed status line');
  }
}

export function invalid(message: string): UpstreamError {
  return new UpstreamError('invalid_response', message);
}

/**
 * the transfer codings (all fields, comma-joined) are `chunked` once and nothing else, and it is the
 * last element: llhttp reads `chunked,` as not chunked (a body to the close), so Portico must not read
 * it as chunked; empty elements before it are allowed (RFC 9110 §5.6.1)
 */
function onlyChunked(codings: string): boolean {
  const elements = codings.slice(0, -1).split(',');
  if (elements[elements.length - 1].trim().toLowerCase() !== 'chunked') return false;
  for (let i = 0; i < elements.length - 1; i++) if (elements[i].trim() !== '') return false;
  return true;
}

/** text[from, to) without leading and trailing SP and HTAB (RFC 9112 §5.1; not String.trim(), which also drops NBSP) */
function trimOws(text: string, from: number, to: number): string {
  let start = from;
  let end = to;
  while (start < end && (text.charCodeAt(start) === 32 || text.charCodeAt(start) === 9)) start++;
  while (end > start && (text.charCodeAt(end - 1) === 32 || text.charCodeAt(end - 1) === 9)) end--;
  return text.slice(start, end);
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
