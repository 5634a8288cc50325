// A project's traffic to its upstream (DESIGN §3 item 5): plain requests through the
// forwarder (keep-alive pool, streaming both ways, client abort cancels), WebSockets over HTTP/1.1
// passed on as upgrades (websocket-h1.ts) and over HTTP/2 bridged to them (websocket-h2.ts).
//
// What the upstream sees, for both:
// 1. the path: the upstream's base path + the visitor's path (dot segments resolved first, so
//    `/../x` cannot climb out of the base path) + the visitor's query;
// 2. Host: the upstream's own host, as nginx's `proxy_pass` does by default. Upstreams are often
//    deploy platforms or TLS origins that route, or present a certificate, by their own name; the
//    visitor's hostname travels in X-Forwarded-Host;
// 3. X-Forwarded-For / -Proto / -Host set by Portico; whatever the client sent under `Forwarded`,
//    `X-Forwarded-*` or `X-Real-IP` is dropped, so an upstream can trust these headers;
// 4. no hop-by-hop headers (RFC 9110 §7.6.1), except Connection/Upgrade on an upgrade request.
import type { IncomingMessage, ServerResponse, IncomingHttpHeaders } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse, ServerHttp2Stream } from 'node:http2';
import type { Duplex } from 'node:stream';
import { HttpError, sendError } from '../errors.ts';
import { sendPage, upstreamFailurePage, upstreamUnreachablePage } from '../edge/pages.ts';
import { UpstreamError } from './upstream-error.ts';
import { connectionTokens, isHopByHop, type Forwarder, type Target, type UpstreamErrorKind } from './forward.ts';
import { proxyStream, type StreamContext } from './forward-h2.ts';
import { bridgeWebSocket } from './websocket-h2.ts';
import { answerOn, passUpgrade, refuseUpgrade } from './websocket-h1.ts';

export interface ProxyContext {
  clientIp: string;
  hostname: string;
  /** original scheme */
  proto: 'https' | 'http';
}

export interface ProjectProxy {
  /** forwards one request to `upstream` (an origin URL, maybe with a base path); answers 502/504 HTML pages on failure */
  web(req: Http2ServerRequest | IncomingMessage, res: Http2ServerResponse | ServerResponse, upstream: string, ctx: ProxyContext): Promise<void>;
  /** an HTTP/2 request on Node's core stream API, the same rules as web() (forward-h2.ts); never rejects */
  stream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, upstream: string, ctx: StreamContext): Promise<void>;
  /**
   * HTTP/1.1 Upgrade (WebSocket) — to be wired on the HTTPS server's 'upgrade' event. `onEnd`, once
   * the visitor's connection has closed: the status it was answered (101: a WebSocket, now over) and
   * whether that answer was cut short or never came (websocket-h1.ts)
   */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, upstream: string, ctx: ProxyContext, onEnd?: (status: number, aborted: boolean) => void): void;
  /** a WebSocket over HTTP/2 (extended CONNECT, RFC 8441), bridged to an HTTP/1.1 upgrade (websocket-h2.ts) */
  connect(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, upstream: string, ctx: ProxyContext): void;
  /** ends the WebSocket tunnels still open; the forwarder belongs to the caller, which closes it */
  close(): Promise<void>;
}

export interface ProjectProxyOptions {
  /** how long a WebSocket upstream may take to connect and answer the upgrade; plain requests use the forwarder's timeout */
  timeoutMs: number;
  /** one call per upstream failure; failures caused by the visitor leaving are not reported */
  onError(kind: UpstreamErrorKind | 'websocket'): void;
}

export function createProjectProxy(forwarder: Forwarder, options: ProjectProxyOptions): ProjectProxy {
  const open = new Set<Duplex>();

  return {
    async web(req, res, upstream, ctx) {
      let target: Target;
      try {
        target = targetOf(upstream, req.url);
      } catch {
        options.onError('other');
        sendPage(res, 502, upstreamUnreachablePage(ctx.hostname));
        return;
      }
      try {
        await forwarder.forward(req, res, target, forwardedHeaders(ctx), dropped(req.headers), options.onError);
      } catch (err) {
        if (!(err instanceof HttpError)) throw err;
        const { status, html } = upstreamFailurePage(err.cause instanceof UpstreamError ? err.cause.kind : undefined, ctx.hostname);
        sendPage(res, status, html);
      }
    },

    stream(stream, headers, flags, upstream, ctx) {
      return proxyStream(forwarder.client, stream, headers, flags, upstream, ctx, options.onError);
    },

    upgrade(req, socket, head, upstream, ctx, onEnd = ignore) {
      // a visitor resetting the connection must never become an uncaught 'error'
      socket.on('error', () => socket.destroy());
      open.add(socket);
      socket.once('close', () => open.delete(socket));
      if (req.method !== 'GET' || req.headers.upgrade?.toLowerCase() !== 'websocket') {
        const res = answerOn(req, socket);
        socket.once('close', () => onEnd(400, !res.writableFinished));
        sendError(res, 'invalid_request', 'Only WebSocket upgrades (GET with Upgrade: websocket) are passed to a project.');
        return;
      }
      let target: URL;
      try {
        target = targetUrl(upstream, req.url);
      } catch {
        options.onError('websocket');
        refuseUpgrade(req, socket, 502, upstreamUnreachablePage(ctx.hostname), onEnd);
        return;
      }
      const headers: Record<string, string | string[]> = { ...upgradeHeaders(req.headers), connection: 'Upgrade', upgrade: 'websocket', ...forwardedHeaders(ctx), host: target.host };
      // the visitor's key: its client checks the upstream's Sec-WebSocket-Accept itself
      const key = req.headers['sec-websocket-key'];
      if (key !== undefined) headers['sec-websocket-key'] = key;
      passUpgrade(req, socket, head, target, headers, { timeoutMs: options.timeoutMs, hostname: ctx.hostname, onError: () => options.onError('websocket'), onEnd });
    },

    connect(stream, headers, upstream, ctx) {
      let target: URL;
      try {
        target = targetUrl(upstream, headers[':path'] as string | undefined);
      } catch {
        options.onError('websocket');
        stream.respond({ ':status': 502, 'content-length': 0 }, { endStream: true });
        return;
      }
      bridgeWebSocket(stream, target, { ...upgradeHeaders(headers), ...forwardedHeaders(ctx), host: target.host }, {
        timeoutMs: options.timeoutMs,
        closeGraceMs: Math.min(options.timeoutMs, 10_000),
        onError: () => options.onError('websocket'),
        onOpen: (socket) => {
          open.add(socket);
          socket.once('close', () => open.delete(socket));
        },
      });
    },

    async close() {
      // destroying the client side makes the 'close' handlers above take the upstream side down; a
      // WebSocket over HTTP/2 is tracked by its upstream socket, whose end resets the stream
      for (const socket of open) socket.destroy();
    },
  };
}

/** Upstream origin + base path + the visitor's path and query (see the list at the top). */
// upstream URL → its origin and base path, parsed once
const parsedUpstreams = new Map<string, { origin: string; base: string }>();
// anything a URL parser would rewrite in a path: dot segments (also encoded), `//`, backslashes
const NEEDS_NORMALISING = /\/\.|%2e|\/\/|\\/i;

/** targetUrl() without building URL objects for the paths that need no normalising (nearly all). */
export function targetOf(upstream: string, requestUrl = '/'): Target {
  let parsed = parsedUpstreams.get(upstream);
  if (!parsed) {
    const base = new URL(upstream);
    parsed = { origin: base.origin, base: base.pathname.replace(/\/+$/, '') };
    if (parsedUpstreams.size >= 10_000) parsedUpstreams.clear();
    parsedUpstreams.set(upstream, parsed);
  }
  const q = requestUrl.indexOf('?');
  const path = q === -1 ? requestUrl : requestUrl.slice(0, q);
  if (requestUrl.startsWith('/') && !NEEDS_NORMALISING.test(path)) return { origin: parsed.origin, path: parsed.base + requestUrl };
  const target = targetUrl(upstream, requestUrl);
  return { origin: target.origin, path: target.pathname + target.search };
}

export function targetUrl(upstream: string, requestUrl = '/'): URL {
  const base = new URL(upstream);
  let visitor = requestUrl;
  if (!visitor.startsWith('/')) {
    // absolute-form (`GET http://host/path`) or `OPTIONS *`
    visitor = URL.canParse(visitor) ? new URL(visitor).pathname + new URL(visitor).search : '/';
  }
  const q = visitor.indexOf('?');
  // the pathname setter resolves dot segments without ever reading `//host` as an authority
  const normal = new URL('http://x');
  normal.pathname = q === -1 ? visitor : visitor.slice(0, q);
  const target = new URL(base.origin);
  target.pathname = base.pathname.replace(/\/+$/, '') + normal.pathname;
  target.search = q === -1 ? '' : visitor.slice(q);
  return target;
}

function forwardedHeaders(ctx: ProxyContext): Record<string, string> {
  return { 'x-forwarded-for': ctx.clientIp, 'x-forwarded-proto': ctx.proto, 'x-forwarded-host': ctx.hostname };
}

const CLIENT_FORWARDED: ReadonlySet<string> = new Set(['forwarded', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-real-ip']);

function isClientForwarded(name: string): boolean {
  return CLIENT_FORWARDED.has(name) || name.startsWith('x-forwarded-');
}

/** The client's forwarding headers to drop: the fixed set, plus any other `x-forwarded-*` it sent. */
function dropped(headers: IncomingHttpHeaders): ReadonlySet<string> {
  let more: string[] | undefined;
  for (const name of Object.keys(headers)) {
    if (!CLIENT_FORWARDED.has(name) && name.startsWith('x-forwarded-')) (more ??= []).push(name);
  }
  return more ? new Set([...CLIENT_FORWARDED, ...more]) : CLIENT_FORWARDED;
}

/**
 * A WebSocket request's end-to-end headers, for either protocol: no pseudo-headers, hop-by-hop,
 * Connection-named or client-sent forwarding headers, no Sec-WebSocket-Key (over HTTP/2 the bridge
 * makes its own; over HTTP/1.1 the visitor's is added back) and no Content-Length: the upgrade goes up
 * without a body (what the visitor sends reaches the upstream inside the tunnel, once it is open), so
 * a length would have the upstream wait for a body that never comes.
 */
function upgradeHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const kept: Record<string, string | string[]> = {};
  const tokens = connectionTokens(headers.connection);
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || name.startsWith(':') || isHopByHop(name) || tokens.has(name) || isClientForwarded(name) || name === 'sec-websocket-key' || name === 'content-length') continue;
    kept[name] = value;
  }
  return kept;
}

const ignore = () => undefined;
