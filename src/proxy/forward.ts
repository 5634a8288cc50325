// Forwards one request to an upstream over a keep-alive pool (http1-client.ts) and streams the answer back.
// Hop-by-hop headers (RFC 9110 §7.6.1) and HTTP/2 pseudo-headers never cross; bodies stream both
// ways; a client that goes away aborts the upstream request; refused → 502, silent → 504; a request
// whose Transfer-Encoding is not chunked alone → 501, nothing sent up.
import type { Readable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import { HttpError, sendError, type Response } from '../errors.ts';
import type { Request } from '../api/body.ts';
import { createHttp1Client, UpstreamError, type Http1Client, type Sink, type UpstreamErrorKind } from './http1-client.ts';
import { joinRepeated, SINGLE_VALUE } from './h2-fields.ts';

export type { UpstreamErrorKind };

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade',
  'proxy-authenticate', 'proxy-authorization', 'http2-settings', 'host',
]);

/** Where one request goes: `http://host:port` and the path with its query. */
export interface Target {
  origin: string;
  path: string;
}

export interface Forwarder {
  /**
   * `target` is the upstream origin and the path + query; `extra` headers are added after filtering.
   * `report`, when given, receives this call's upstream failures instead of the forwarder's `onError`,
   * so one forwarder shared by several callers counts each failure once, under the caller's name.
   */
  /**
   * `own`: answer fields the caller sets that the upstream's may not replace (the API's X-RateLimit-*,
   * Deprecation …): the upstream's copy is dropped, or for a list-valued field (Link) added after ours.
   */
  forward(req: Request, res: Response, target: Target, extra: Record<string, string>, drop?: ReadonlySet<string>, report?: (kind: UpstreamErrorKind) => void, own?: ReadonlySet<string>): Promise<void>;
  /** the upstream pool, shared with HTTP/2 streams forwarded on Node's core API (forward-h2.ts) */
  readonly client: Http1Client;
  /** a new timeouts.upstreamMs (a reload): for the calls that start from now on */
  setTimeout(timeoutMs: number): void;
  close(): Promise<void>;
}

/** A header that describes one connection (RFC 9110 §7.6.1), or Host, which each hop sets for itself. */
export function isHopByHop(name: string): boolean {
  return HOP_BY_HOP.has(name);
}

/** The header names listed in a Connection header, lowercased: hop-by-hop too (RFC 9110 §7.6.1). */
export function connectionTokens(value: string | string[] | undefined): ReadonlySet<string> {
  if (value === undefined) return NO_TOKENS;
  return new Set((Array.isArray(value) ? value.join(',') : value).toLowerCase().split(',').map((s) => s.trim()).filter(Boolean));
}

const NO_TOKENS: ReadonlySet<string> = new Set();

export function createForwarder(timeoutMs: number, onError: (kind: UpstreamErrorKind) => void = () => undefined): Forwarder {
  // the client and its connections read these at each call
  const options = { timeoutMs, connectTimeoutMs: Math.min(timeoutMs, 10_000), maxConnections: 256 };
  const client = createHttp1Client(options);
  return {
    setTimeout(next) {
      options.timeoutMs = next;
      options.connectTimeoutMs = Math.min(next, 10_000);
    },
    async forward(req, res, target, extra, drop, report = onError, own) {
      const method = req.method ?? 'GET';
      if (!REQUEST_TARGET.test(target.path)) throw new HttpError('invalid_request', 'The request target is not valid.');
      // RFC 9112 §6.1: Node's server takes any codings before a final chunked and undoes only the
      // chunked one; the field is hop-by-hop, so the rest (`gzip, chunked`) would reach the upstream as a
      // body labelled as nothing. 501, as §6.1 asks of a coding not understood (Go's and Caddy's answer);
      // written here, not thrown: project-proxy.ts turns a thrown error into the 502 page
      const codings = req.headers['transfer-encoding'];
      if (codings !== undefined && codings.toLowerCase() !== 'chunked') {
        const named = codings.split(',').map((s) => s.trim()).filter((s) => s !== '' && s.toLowerCase() !== 'chunked');
        sendError(res, 'not_implemented', `Transfer-Encoding ${named.join(', ')} cannot be passed on: a request body may be framed with chunked alone (a compressed body goes with Content-Encoding).`);
        return;
      }
      const declared = req.headers['content-length'];
      // HTTP/1.1: a body only with Content-Length or Transfer-Encoding (RFC 9112 §6.3: without either it
      // is empty, whatever the method; sent on chunked, a bodyless OPTIONS or DELETE carried a stray
      // `0\r\n\r\n` that an upstream reading no chunked bodies takes for its next request). HTTP/2:
      // unless the request ended with its headers
      const stream = (req as { stream?: { endAfterHeaders?: boolean } }).stream;
      const hasBody = stream !== undefined ? !stream.endAfterHeaders : declared !== undefined || codings !== undefined;
      // a declared length is passed on as is; otherwise (chunked, or HTTP/2 without one) the body goes
      // chunked. An empty body goes as none: the client writes `content-length: 0` for POST, PUT, PATCH
      const bodyLength = hasBody && typeof declared === 'string' && DIGITS.test(declared) && codings === undefined ? Number(declared) : undefined;
      const call = client.request(target.origin, {
        head: `${method} ${target.path} HTTP/1.1\r\n${headerLines(req.headers, extra, drop)}`,
        method,
        body: hasBody && bodyLength !== 0 ? (req as unknown as Readable) : null,
        bodyLength,
        onHead(statusCode, fields, connection, length) {
          upstreamFields = fields;
          res.statusCode = statusCode;
          const named = connection === '' ? NO_TOKENS : connectionTokens(connection);
          const h2 = (res as { stream?: unknown }).stream !== undefined;
          for (let i = 0; i < fields.length; i += 2) {
            const name = fields[i];
            // the visitor's framing is Portico's: Content-Length from what is forwarded (below),
            // Transfer-Encoding (hop-by-hop) by Node's server for the visitor's protocol
            if (HOP_BY_HOP.has(name) || name === 'content-length' || named.has(name)) continue;
            if (own?.has(name) && res.hasHeader(name)) {
              if (name === 'link') res.appendHeader(name, fields[i + 1]);
              continue;
            }
            // a repeated field (Set-Cookie …) is appended, or over HTTP/2 joined when Node sends it once
            // (h2-fields.ts); a first one replaces what Portico set (HSTS)
            if (!repeated(fields, i)) res.setHeader(name, fields[i + 1]);
            else if (h2 && SINGLE_VALUE.has(name)) res.setHeader(name, joinRepeated(name, res.getHeader(name) as string, fields[i + 1]));
            else res.appendHeader(name, fields[i + 1]);
          }
          // a 205 has no content (RFC 9110 §15.3.6): its body is read and dropped, as over HTTP/2 (forward-h2.ts)
          if (statusCode === 205) {
            res.setHeader('content-length', 0);
            return { write: () => true, end: () => res.end(), once: () => undefined };
          }
          if (length !== -1) res.setHeader('content-length', length);
          return res as unknown as Sink;
        },
      });
      // writableEnded, not writableFinished: an HTTP/2 stream the client reset reports
      // writableFinished === true (its Http2Stream counts as finished once closed), so a cancelled
      // stream never aborted its upstream request (test/proxy/project-proxy.test.ts, HTTP/2 cancel).
      // Once end() was called the upstream answer was read to its end: nothing is left to abort.
      let upstreamFields: string[] = [];
      const onClose = () => {
        if (!res.writableEnded) call.abort();
      };
      res.once('close', onClose);
      try {
        await call.done;
      } catch (err) {
        const kind = err instanceof UpstreamError ? err.kind : 'other';
        report(kind);
        const status = kind === 'timeout' ? 504 : 502;
        // before the visitor got a byte: a 502/504 page instead of what onHead had set
        if (!res.headersSent) {
          for (let i = 0; i < upstreamFields.length; i += 2) res.removeHeader(upstreamFields[i]);
          const failure = new HttpError(status === 504 ? 'gateway_timeout' : 'bad_gateway');
          // the upstream's failure, for a caller that words its page by kind (project-proxy.ts)
          failure.cause = err;
          throw failure;
        }
        // after: cutting the answer (HTTP/1.1: close; HTTP/2: RST_STREAM) is the only honest signal,
        // and the access log records the failure, not the status the upstream had started with
        if (!res.writableFinished) {
          res.statusCode = status;
          abortAnswer(res, err as Error);
        }
      } finally {
        res.off('close', onClose);
      }
    },
    client,
    close: async () => client.close(),
  };
}

/**
 * ends an answer already under way as failed: HTTP/1.1 closes the connection; HTTP/2 resets the
 * stream with INTERNAL_ERROR at once (close(code) would first end it cleanly, so the visitor would take
 * a cut body for a whole one)
 */
function abortAnswer(res: Response, err: Error): void {
  const stream = (res as { stream?: { destroy(err: Error): void } }).stream;
  if (stream) stream.destroy(err);
  else (res as { destroy(): void }).destroy();
}

/** the field at `i` came earlier in the list too */
function repeated(fields: string[], i: number): boolean {
  const name = fields[i];
  for (let j = 0; j < i; j += 2) if (fields[j] === name) return true;
  return false;
}

// origin-form as targetOf() builds it: no whitespace or control character may reach the request line
const REQUEST_TARGET = /^\/[^\s\x00-\x1f\x7f]*$/;
const DIGITS = /^\d{1,15}$/;
// a header value Portico adds must not be able to end its line
const UNSAFE_VALUE = /[\r\n\0]/;

/**
 * The request's header lines for the upstream: hop-by-hop, pseudo, `drop`ped and Connection-named
 * headers filtered out, `extra` added. Host and the body framing are the client's to write.
 */
function headerLines(incoming: IncomingHttpHeaders, extra: Record<string, string>, drop?: ReadonlySet<string>): string {
  let lines = '';
  const named = connectionTokens(incoming.connection);
  for (const name in incoming) {
    const value = incoming[name];
    // `expect: 100-continue` is answered at the edge, once the body is read (edge/http1-answers.ts);
    // Content-Length is written by the client, with the framing it chose
    if (value === undefined || name.charCodeAt(0) === 58 || name === 'expect' || name === 'content-length' || HOP_BY_HOP.has(name) || drop?.has(name) || named.has(name)) continue;
    if (typeof value === 'string') lines += `${name}: ${value}\r\n`;
    else for (const one of value) lines += `${name}: ${one}\r\n`;
  }
  for (const name in extra) {
    const value = extra[name];
    if (UNSAFE_VALUE.test(value)) throw new HttpError('invalid_request', `The ${name} header would not be valid.`);
    lines += `${name}: ${value}\r\n`;
  }
  return lines;
}
