// Forwards one request to an upstream over an undici keep-alive pool and streams the answer back.
// Hop-by-hop headers (RFC 9110 §7.6.1) and HTTP/2 pseudo-headers never cross; bodies stream both
// ways; a client that goes away aborts the upstream request; refused → 502, silent → 504.
import { Agent, errors as undiciErrors, type Dispatcher } from 'undici';
import type { Readable, Writable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import { HttpError, type Response } from '../errors.ts';
import type { Request } from '../api/body.ts';

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade',
  'proxy-authenticate', 'proxy-authorization', 'http2-settings', 'host',
]);

export type UpstreamErrorKind = 'connect' | 'timeout' | 'reset' | 'other';

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
  forward(req: Request, res: Response, target: Target, extra: Record<string, string>, drop?: ReadonlySet<string>, report?: (kind: UpstreamErrorKind) => void): Promise<void>;
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
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: 256, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, connectTimeout: Math.min(timeoutMs, 10_000) });
  return {
    async forward(req, res, target, extra, drop, report = onError) {
      const abort = new AbortController();
      // writableEnded, not writableFinished: an HTTP/2 stream the client reset reports
      // writableFinished === true (its Http2Stream counts as finished once closed), so a cancelled
      // stream never aborted its upstream request (test/proxy/project-proxy.test.ts, HTTP/2 cancel).
      // Once end() was called the upstream body was read to its end: nothing is left to abort.
      const onClose = () => {
        if (!res.writableEnded) abort.abort();
      };
      res.once('close', onClose);
      const headers = requestHeaders(req.headers, extra, drop);
      const hasBody = req.method !== 'GET' && req.method !== 'HEAD' || req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined;
      let answered = false;
      try {
        // stream(): undici writes the upstream body straight into the response (with back-pressure),
        // no intermediate Readable and no stream.pipeline — both cost a lot per request
        await agent.stream(
          {
            origin: target.origin,
            path: target.path,
            method: req.method as Dispatcher.HttpMethod,
            headers,
            body: hasBody ? (req as unknown as Readable) : undefined,
            signal: abort.signal,
          },
          ({ statusCode, headers: upstreamHeaders }) => {
            answered = true;
            res.statusCode = statusCode;
            const named = connectionTokens(upstreamHeaders.connection);
            for (const name in upstreamHeaders) {
              const value = upstreamHeaders[name];
              if (value !== undefined && !HOP_BY_HOP.has(name) && !named.has(name)) res.setHeader(name, value);
            }
            return res as unknown as Writable;
          },
        );
      } catch (err) {
        if (abort.signal.aborted) return;
        const kind = classify(err);
        report(kind);
        // before the answer started: a 502/504 page; after: cutting the response is the only honest signal
        if (!answered) throw new HttpError(kind === 'timeout' ? 'gateway_timeout' : 'bad_gateway');
        if (!res.writableFinished) (res as { destroy(): void }).destroy();
      } finally {
        res.off('close', onClose);
      }
    },
    close: () => agent.close(),
  };
}

function requestHeaders(incoming: IncomingHttpHeaders, extra: Record<string, string>, drop?: ReadonlySet<string>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const named = connectionTokens(incoming.connection);
  for (const name in incoming) {
    const value = incoming[name];
    // `expect: 100-continue` was answered by Node's server already (no 'checkContinue' listener), and
    // undici refuses the header outright (NotSupportedError): forwarding it turned every
    // `curl -d @big-file` into a 502.
    if (value === undefined || name.startsWith(':') || name === 'expect' || HOP_BY_HOP.has(name) || drop?.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  return Object.assign(out, extra);
}

function classify(err: unknown): UpstreamErrorKind {
  const code = (err as { code?: string }).code ?? '';
  if (err instanceof undiciErrors.HeadersTimeoutError || err instanceof undiciErrors.BodyTimeoutError || code === 'UND_ERR_CONNECT_TIMEOUT') return 'timeout';
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EHOSTUNREACH' || code === 'EAI_AGAIN') return 'connect';
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET' || code === 'EPIPE') return 'reset';
  return 'other';
}
