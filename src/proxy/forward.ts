// Forwards one request to an upstream over an undici keep-alive pool and streams the answer back.
// Hop-by-hop headers (RFC 9110 §7.6.1) and HTTP/2 pseudo-headers never cross; bodies stream both
// ways; a client that goes away aborts the upstream request; refused → 502, silent → 504.
import { Agent, errors as undiciErrors, type Dispatcher } from 'undici';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import { HttpError, type Response } from '../errors.ts';
import type { Request } from '../api/body.ts';

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade',
  'proxy-authenticate', 'proxy-authorization', 'http2-settings', 'host',
]);

export type UpstreamErrorKind = 'connect' | 'timeout' | 'reset' | 'other';

export interface Forwarder {
  /** `target` is the upstream origin + path + query; `extra` headers are added after filtering */
  forward(req: Request, res: Response, target: URL, extra: Record<string, string>, drop?: ReadonlySet<string>): Promise<void>;
  close(): Promise<void>;
}

export function createForwarder(timeoutMs: number, onError: (kind: UpstreamErrorKind) => void = () => undefined): Forwarder {
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: 256, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, connectTimeout: Math.min(timeoutMs, 10_000) });
  return {
    async forward(req, res, target, extra, drop) {
      const abort = new AbortController();
      const onClose = () => {
        if (!res.writableFinished) abort.abort();
      };
      res.once('close', onClose);
      const headers = requestHeaders(req.headers, extra, drop);
      const hasBody = req.method !== 'GET' && req.method !== 'HEAD' || req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined;
      let upstream: Dispatcher.ResponseData;
      try {
        upstream = await agent.request({
          origin: target.origin,
          path: target.pathname + target.search,
          method: req.method as Dispatcher.HttpMethod,
          headers,
          body: hasBody ? (req as unknown as Readable) : undefined,
          signal: abort.signal,
        });
      } catch (err) {
        res.off('close', onClose);
        if (abort.signal.aborted) return;
        const kind = classify(err);
        onError(kind);
        throw new HttpError(kind === 'timeout' ? 'gateway_timeout' : 'bad_gateway');
      }
      res.statusCode = upstream.statusCode;
      for (const [name, value] of Object.entries(upstream.headers)) {
        if (value !== undefined && !HOP_BY_HOP.has(name)) res.setHeader(name, value);
      }
      try {
        await pipeline(upstream.body, res as unknown as NodeJS.WritableStream);
      } catch (err) {
        if (!abort.signal.aborted) onError(classify(err));
        // headers are gone already: the only honest signal left is to cut the response
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
  const connectionTokens = typeof incoming.connection === 'string' ? incoming.connection.toLowerCase().split(',').map((s) => s.trim()) : [];
  for (const [name, value] of Object.entries(incoming)) {
    if (value === undefined || name.startsWith(':') || HOP_BY_HOP.has(name) || drop?.has(name) || connectionTokens.includes(name)) continue;
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
