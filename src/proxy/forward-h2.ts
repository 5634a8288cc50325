// A project's HTTP/2 requests forwarded on Node's core stream API: the request's headers object as the
// 'stream' event gives it, one respond() with a plain headers object, the upstream body written
// straight into the stream. Node's compatibility layer (Http2ServerRequest/Response, a socket proxy,
// per-response header maps and their listeners) cost more CPU per HTTP/2 request than the rest of
// the proxy, most of it as garbage collection (docs/performance.md, "HTTP/2").
//
// The rules are forward.ts's, for an HTTP/2 visitor:
// - what goes up: the visitor's fields minus pseudo-headers (RFC 9113 §8.3), hop-by-hop fields
//   (RFC 9110 §7.6.1), Content-Length and Expect (the client frames the body), and any `Forwarded`,
//   `X-Forwarded-*` or `X-Real-IP` the visitor sent; Portico's X-Forwarded-For/-Proto/-Host added;
// - what comes back: the upstream's fields minus hop-by-hop ones and those its Connection field
//   names (HTTP/2 forbids them, RFC 9113 §8.2.2); Transfer-Encoding and the upstream's
//   Content-Length never pass as they are: Portico writes content-length itself when the head says
//   how long the body is (0 for a 205, whose body is dropped: RFC 9110 §15.3.6); HSTS is Portico's
//   unless the upstream sent its own; a repeated field Node sends only once passes once (h2-fields.ts);
// - a head the visitor would not take whole is refused as invalid_response (a 502 page), never sent:
//   past the visitor's SETTINGS_MAX_HEADER_LIST_SIZE it would reset the stream, and past what nghttp2
//   may send in one header block respond() fails with a frame error, on which Node closes the whole
//   session (GOAWAY), the visitor's other streams with it (see fitsPeer());
// - flow control end to end: a full stream (the visitor's window is shut, or it reads slowly) makes
//   write() return false, and the upstream connection stops being read until 'drain';
// - the visitor resets the stream: the upstream request is aborted; refused → 502, silent → 504
//   (HTML pages); an upstream failing mid-answer resets the stream (INTERNAL_ERROR), the only
//   honest signal once a status went out.
import http2, { type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import type { Readable } from 'node:stream';
import { connectionTokens, isHopByHop } from './forward.ts';
import { joinRepeated, SINGLE_VALUE } from './h2-fields.ts';
import { UpstreamError, type Http1Client, type Sink, type UpstreamErrorKind } from './http1-client.ts';
import { targetOf } from './project-proxy.ts';
import { H2_SETTINGS } from '../edge/h2-limits.ts';
import { upstreamFailurePage, upstreamUnreachablePage } from '../edge/pages.ts';
import { errorBody } from '../errors.ts';

export interface StreamContext {
  clientIp: string;
  hostname: string;
  /** Strict-Transport-Security for the answer (the upstream's own wins), or undefined */
  hsts: string | undefined;
  /** the request's fields as received, [name, value, …] (the 'stream' event's rawHeaders) */
  rawHeaders: string[];
  /** the status of the answer's HEADERS frame once sent (0 before): for the access line */
  status: number;
}

const { NGHTTP2_FLAG_END_STREAM } = http2.constants;
const NO_TOKENS: ReadonlySet<string> = new Set();
// origin-form as targetOf() builds it: no whitespace or control character may reach the request line
const REQUEST_TARGET = /^\/[^\s\x00-\x1f\x7f]*$/;
const DIGITS = /^\d{1,15}$/;
const UNSAFE_VALUE = /[\r\n\0]/;
// RFC 9113 §6.5.2: a field counts its name and value in octets plus 32 toward SETTINGS_MAX_HEADER_LIST_SIZE
const FIELD_OVERHEAD = 32;
// nghttp2 refuses to send a HEADERS frame whose estimated payload (nghttp2_hd_deflate_bound: 12
// octets, then 12 per field plus its name and value; and 5 for a priority block) is past
// max_send_header_block_length, 64 KiB unless Node's maxSendHeaderBlockLength says otherwise
// (listeners.ts does not set it)
const MAX_SEND_HEADER_BLOCK = 64 * 1024;
const BLOCK_BOUND = 12 + 5;
const BLOCK_FIELD_BOUND = 12;
// the `date` field respond() adds when the answer has none
const DATE_FIELD_LENGTH = 'date'.length + 'Thu, 01 Jan 1970 00:00:00 GMT'.length;
// nghttp2's value for a peer that sent no SETTINGS_MAX_HEADER_LIST_SIZE ("unlimited")
const UNANNOUNCED = 2 ** 32 - 1;
// how long a request body of unknown length is looked at for its end before it goes up chunked
const BODY_PROBE_MS = 200;

/**
 * Forwards one HTTP/2 stream to `upstream` and streams the answer back; answers 502/504 pages when
 * the upstream fails before its head. Resolves when the exchange is over; never rejects.
 */
export async function proxyStream(client: Http1Client, stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, upstream: string, ctx: StreamContext, onError: (kind: UpstreamErrorKind) => void): Promise<void> {
  let origin: string;
  let path: string;
  try {
    ({ origin, path } = targetOf(upstream, headers[':path']));
  } catch {
    onError('other');
    respond(stream, 502, upstreamUnreachablePage(ctx.hostname), HTML, ctx);
    return;
  }
  const method = headers[':method'] ?? 'GET';
  if (!REQUEST_TARGET.test(path) || UNSAFE_VALUE.test(ctx.hostname) || UNSAFE_VALUE.test(ctx.clientIp)) {
    respond(stream, 400, JSON.stringify(errorBody('invalid_request', 'The request target is not valid.')), 'application/json; charset=utf-8', ctx);
    return;
  }
  // END_STREAM on the request's HEADERS frame: there is no body, whatever the method. Without it DATA
  // may follow, whatever the method too: a GET's body goes up as forward.ts sends it (chunked unless
  // its length was declared), never dropped. An empty body goes as none: the client writes
  // `content-length: 0` for POST, PUT, PATCH
  const declared = headers['content-length'];
  let hasBody = (flags & NGHTTP2_FLAG_END_STREAM) === 0;
  const bodyLength = hasBody && typeof declared === 'string' && DIGITS.test(declared) ? Number(declared) : undefined;
  // of unknown length: a client that ends the stream with an empty DATA frame sent no body either
  if (hasBody && bodyLength === undefined && headers.expect === undefined) {
    hasBody = !(await endsEmpty(stream, BODY_PROBE_MS));
    // the visitor left meanwhile: nothing goes up
    if (stream.destroyed || stream.closed) return;
  }
  const call = client.request(origin, {
    head: `${method} ${path} HTTP/1.1\r\n${requestLines(headers, ctx)}`,
    method,
    body: hasBody && bodyLength !== 0 ? (stream as Readable) : null,
    bodyLength,
    onHead: (status, fields, connection, length) => respondHead(stream, status, fields, connection, length, ctx),
  });
  // the visitor reset the stream (or the session went away) before the answer was written in full.
  // Not `writableEnded`: Node ends the writable side of a stream the peer reset before 'close'.
  // An exchange already over ignores abort().
  const onClose = () => call.abort();
  stream.once('close', onClose);
  try {
    await call.done;
  } catch (err) {
    const kind = err instanceof UpstreamError ? err.kind : 'other';
    onError(kind);
    if (!call.answered) {
      const { status, html } = upstreamFailurePage(kind, ctx.hostname);
      respond(stream, status, html, HTML, ctx);
    } else if (!stream.destroyed && !stream.writableFinished) {
      // the answer had started: reset the stream at once (close() would first end it cleanly, and the
      // visitor would take a cut body for a whole one); the access line says 502/504, not the upstream's status
      ctx.status = kind === 'timeout' ? 504 : 502;
      stream.destroy(err as Error);
    }
  } finally {
    stream.off('close', onClose);
  }
}

/**
 * Whether the visitor's stream ends before its first byte of content, waiting at most `ms` for either
 * (Go's Transport looks at a body of unknown length the same way, for 200 ms). A first chunk is put
 * back for the upload; a stream still silent after `ms` is taken as carrying content.
 */
function endsEmpty(stream: ServerHttp2Stream, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const settle = (empty: boolean) => {
      clearTimeout(timer);
      stream.off('readable', onReadable);
      stream.off('end', onEnd);
      stream.off('close', onClose);
      resolve(empty);
    };
    const onReadable = () => {
      const chunk: Buffer | null = stream.read();
      // null at the end of the stream: 'end' follows
      if (chunk === null) return;
      stream.unshift(chunk);
      settle(false);
    };
    const onEnd = () => settle(true);
    const onClose = () => settle(false);
    const timer = setTimeout(settle, ms, false);
    stream.on('readable', onReadable);
    stream.once('end', onEnd);
    stream.once('close', onClose);
  });
}

/**
 * The request's header lines for the upstream (see the rules at the top); Host is the client's to
 * write. Read from the raw list (a for-in over the headers object cost more); cookie crumbs are sent
 * as the one field HTTP/1.1 needs, joined with '; ' (RFC 9113 §8.2.3), as Node joined them.
 */
function requestLines(incoming: IncomingHttpHeaders, ctx: StreamContext): string {
  let lines = '';
  const named = incoming.connection === undefined ? NO_TOKENS : connectionTokens(incoming.connection);
  const raw = ctx.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i];
    if (name.charCodeAt(0) === 58 || name === 'cookie' || name === 'content-length' || name === 'expect' || isHopByHop(name) || named.has(name) || isClientForwarded(name)) continue;
    lines += `${name}: ${raw[i + 1]}\r\n`;
  }
  if (incoming.cookie !== undefined) lines += `cookie: ${incoming.cookie}\r\n`;
  return `${lines}x-forwarded-for: ${ctx.clientIp}\r\nx-forwarded-proto: https\r\nx-forwarded-host: ${ctx.hostname}\r\n`;
}

function isClientForwarded(name: string): boolean {
  // 'f' and 'x' first: nearly every field is neither
  const c = name.charCodeAt(0);
  if (c === 102) return name === 'forwarded';
  if (c !== 120) return false;
  return name === 'x-real-ip' || name.startsWith('x-forwarded-');
}

/**
 * The upstream's head as the stream's HEADERS frame; the sink its body goes to. respond() takes the
 * fields as a flat list (Node 24.7 and later; Portico runs on ^24.21), the shape the upstream's head
 * is parsed into: no headers object is built, copied and walked again.
 */
function respondHead(stream: ServerHttp2Stream, status: number, fields: string[], connection: string, length: number, ctx: StreamContext): Sink {
  // the visitor left meanwhile: the 'close' listener aborts the exchange
  if (stream.destroyed || stream.closed) return DISCARD;
  const out: string[] = [':status', String(status)];
  const named = connection === '' ? NO_TOKENS : connectionTokens(connection);
  let hsts = ctx.hsts;
  let dated = false;
  // where in `out` each single-value field is (h2-fields.ts): one entry per name, a repeat is joined to it
  let singles: number[] | undefined;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i];
    // the framing is Portico's: content-length from what is forwarded (below), never the upstream's
    if (name === 'content-length' || isHopByHop(name) || named.has(name)) continue;
    if (name === 'strict-transport-security') hsts = undefined;
    else if (name === 'date') dated = true;
    if (SINGLE_VALUE.has(name)) {
      const at = singles === undefined ? -1 : findField(out, singles, name);
      if (at !== -1) {
        out[at + 1] = joinRepeated(name, out[at + 1], fields[i + 1]);
        continue;
      }
      (singles ??= []).push(out.length);
    }
    out.push(name, fields[i + 1]);
  }
  // RFC 9110 §15.3.6: a 205 has no content, whatever the upstream framed (its body is read and
  // dropped, as for 204 and 304); content-length 0 says so, and matches the END_STREAM below, where the
  // upstream's length would make the message malformed (RFC 9113 §8.1.1)
  if (status === 205) out.push('content-length', '0');
  else if (length !== -1) out.push('content-length', String(length));
  if (hsts !== undefined) out.push('strict-transport-security', hsts);
  // thrown from onHead: the client answers the visitor a 502 page and counts an invalid_response
  if (!fitsPeer(stream, out, dated)) throw new UpstreamError('invalid_response', 'the upstream answer head is too large for the HTTP/2 visitor');
  // a HEAD request's stream has ended its writable side already; 204, 205 and 304 carry no body
  const bodiless = stream.writableEnded || status === 204 || status === 205 || status === 304;
  // the types know only the object form
  stream.respond(out as unknown as OutgoingHttpHeaders, bodiless ? { endStream: true } : undefined);
  ctx.status = status;
  return bodiless ? DISCARD : stream;
}

/**
 * Whether the HEADERS frame of `out` (plus the `date` respond() adds unless `dated`) can be sent and
 * will be taken: its header list within the visitor's SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113
 * §6.5.2), or, when it announced none, within the 64 KiB Portico accepts from visitors (h2-limits.ts);
 * and its worst-case HPACK size within what nghttp2 sends in one block. Node writes header strings as
 * latin1, as the upstream's head was read: a string's length is its size in octets.
 */
function fitsPeer(stream: ServerHttp2Stream, out: string[], dated: boolean): boolean {
  let octets = dated ? 0 : DATE_FIELD_LENGTH;
  for (let i = 0; i < out.length; i++) octets += out[i].length;
  const fields = out.length / 2 + (dated ? 0 : 1);
  const announced = stream.session?.remoteSettings.maxHeaderListSize ?? UNANNOUNCED;
  const limit = announced === UNANNOUNCED ? H2_SETTINGS.maxHeaderListSize : announced;
  return octets + fields * FIELD_OVERHEAD <= limit && BLOCK_BOUND + octets + fields * BLOCK_FIELD_BOUND <= MAX_SEND_HEADER_BLOCK;
}

/** the index in `out` of the field `name`, among the single-value fields at `singles`; -1: none yet */
function findField(out: string[], singles: number[], name: string): number {
  for (const at of singles) if (out[at] === name) return at;
  return -1;
}

/** A sink for an answer that has no body on the visitor's side. */
const DISCARD: Sink = {
  write: () => true,
  end: () => undefined,
  once: () => undefined,
};

const HTML = 'text/html; charset=utf-8';

/** Portico's own answer: a 502/504 page as pages.ts writes it, or an Error body as errors.ts does. */
function respond(stream: ServerHttp2Stream, status: number, text: string, type: string, ctx: StreamContext): void {
  if (stream.destroyed || stream.closed || stream.headersSent) return;
  const body = Buffer.from(text);
  const out: OutgoingHttpHeaders = { ':status': status, 'content-type': type, 'content-length': body.length };
  if (type === HTML) out['cache-control'] = 'no-store';
  if (ctx.hsts !== undefined) out['strict-transport-security'] = ctx.hsts;
  ctx.status = status;
  if (stream.writableEnded) {
    stream.respond(out, { endStream: true });
    return;
  }
  stream.respond(out);
  stream.end(body);
}
