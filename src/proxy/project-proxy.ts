// A project's traffic to its upstream (DESIGN §3 item 5): plain requests through the
// forwarder (keep-alive pool, streaming both ways, client abort cancels), WebSocket upgrades through
// http-proxy-3 (http-proxy 1.x leaks an upstream socket per aborted client; TOOLCHAIN.md).
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
import type { IncomingMessage, ServerResponse, IncomingHttpHeaders, ClientRequest } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse, ServerHttp2Stream } from 'node:http2';
import type { Duplex } from 'node:stream';
import type { Socket } from 'node:net';
import type { ProxyServer } from 'http-proxy-3';
import { HttpError } from '../errors.ts';
import { sendPage, upstreamFailurePage, upstreamUnreachablePage } from '../edge/pages.ts';
import { UpstreamError } from './upstream-error.ts';
import { connectionTokens, isHopByHop, type Forwarder, type Target, type UpstreamErrorKind } from './forward.ts';
import { proxyStream, type StreamContext } from './forward-h2.ts';
import { bridgeWebSocket } from './websocket-h2.ts';

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
  /** HTTP/1.1 Upgrade (WebSocket) — to be wired on the HTTPS server's 'upgrade' event */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, upstream: string, ctx: ProxyContext): void;
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

/** One WebSocket upgrade in flight, found again from http-proxy-3's events by the client socket. */
interface Upgrade {
  headers: Record<string, string>;
  connectionTokens: ReadonlySet<string>;
  upgraded: boolean;
  clientGone: boolean;
}

const TIMEOUT = 'PORTICO_UPSTREAM_TIMEOUT';

export function createProjectProxy(forwarder: Forwarder, options: ProjectProxyOptions): ProjectProxy {
  const upgrades = new WeakMap<Duplex, Upgrade>();
  const open = new Set<Duplex>();
  // http-proxy-3 is loaded with the first WebSocket upgrade, not at start
  let wsProxy: Promise<ProxyServer> | undefined;
  const loadWsProxy = (): Promise<ProxyServer> => (wsProxy ??= import('http-proxy-3').then(({ createProxyServer }) => {
    // target comes per call; xfwd off because http-proxy-3 would append to the client's X-Forwarded-*
    const proxy = createProxyServer({ ws: true, xfwd: false, ignorePath: true });
    // Errors of the client socket reach this event (upstream errors go to the per-call callback):
    // without a listener http-proxy-3 throws them, which would take the process down.
    proxy.on('error', (_err, _req, socket) => {
      if (!(socket as Socket).destroyed) (socket as Socket).destroy();
    });
    proxy.on('proxyReqWs', (proxyReq, _req, socket) => {
      const state = upgrades.get(socket);
      if (!state) return;
      rewriteUpgradeHeaders(proxyReq, state);
      // one clock for connect + the upstream's answer to the upgrade
      const timer = setTimeout(() => proxyReq.destroy(Object.assign(new Error('upstream did not answer the upgrade in time'), { code: TIMEOUT })), options.timeoutMs);
      const stop = () => clearTimeout(timer);
      proxyReq.once('response', stop).once('close', stop);
      proxyReq.once('upgrade', (_res, proxySocket: Socket) => {
        stop();
        state.upgraded = true;
        // http-proxy-3 only end()s the other side when one side closes; a peer that never answers the
        // FIN would keep its socket half-open, so finish the write side and then destroy
        socket.once('close', () => proxySocket.destroySoon());
        proxySocket.once('close', () => socket.destroySoon());
      });
      // the visitor left before the upstream answered: http-proxy-3 would keep waiting for it
      socket.once('close', () => {
        if (!state.upgraded) proxyReq.destroy();
      });
    });
    return proxy;
  }));

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

    upgrade(req, socket, head, upstream, ctx) {
      // a visitor resetting the connection must never become an uncaught 'error'
      socket.on('error', () => socket.destroy());
      open.add(socket);
      socket.once('close', () => open.delete(socket));
      if (req.method !== 'GET' || req.headers.upgrade?.toLowerCase() !== 'websocket') {
        rejectUpgrade(socket, 400, 'Bad Request', 'Only WebSocket upgrades are supported.\n');
        return;
      }
      let target: URL;
      try {
        target = targetUrl(upstream, req.url);
      } catch {
        options.onError('websocket');
        rejectUpgrade(socket, 502, 'Bad Gateway', 'The upstream could not be reached.\n');
        return;
      }
      const state: Upgrade = { headers: forwardedHeaders(ctx), connectionTokens: connectionTokens(req.headers.connection), upgraded: false, clientGone: false };
      state.headers.host = target.host;
      upgrades.set(socket, state);
      socket.once('close', () => {
        state.clientGone = true;
      });
      loadWsProxy().then((proxy) => {
        if (state.clientGone) return;
        proxy.ws(req, socket, head, { target }, (err) => {
          if (state.clientGone) return;
          options.onError('websocket');
          if (state.upgraded) {
            socket.destroy();
          } else if ((err as { code?: string }).code === TIMEOUT) {
            rejectUpgrade(socket, 504, 'Gateway Timeout', 'The upstream did not answer in time.\n');
          } else {
            rejectUpgrade(socket, 502, 'Bad Gateway', 'The upstream could not be reached.\n');
          }
        });
      }, () => {
        options.onError('websocket');
        rejectUpgrade(socket, 502, 'Bad Gateway', 'The upstream could not be reached.\n');
      });
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

/** An HTTP/2 WebSocket request's end-to-end headers: what rewriteUpgradeHeaders() leaves of an HTTP/1.1 one. */
function upgradeHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const kept: Record<string, string | string[]> = {};
  const tokens = connectionTokens(headers.connection);
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || name.startsWith(':') || isHopByHop(name) || tokens.has(name) || isClientForwarded(name) || name === 'sec-websocket-key') continue;
    kept[name] = value;
  }
  return kept;
}

/** http-proxy-3 copies every client header; the request is not sent until its end(), so trim here. */
function rewriteUpgradeHeaders(proxyReq: ClientRequest, state: Upgrade): void {
  for (const name of proxyReq.getHeaderNames()) {
    if (name === 'upgrade') continue;
    if (name.startsWith(':') || isHopByHop(name) || state.connectionTokens.has(name) || isClientForwarded(name)) proxyReq.removeHeader(name);
  }
  proxyReq.setHeader('connection', 'Upgrade');
  for (const [name, value] of Object.entries(state.headers)) proxyReq.setHeader(name, value);
}

function rejectUpgrade(socket: Duplex, status: number, reason: string, text: string): void {
  if (socket.destroyed) return;
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  socket.end(`HTTP/1.1 ${status} ${reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`, () => socket.destroy());
}
