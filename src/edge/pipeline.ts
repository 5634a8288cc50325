// The request pipeline of the HTTPS listener, shared by HTTP/2 and HTTP/1.1 (compat API), and its
// HTTP/2 fast path: a project's requests over HTTP/2 served on Node's core stream API (h2-stream.ts,
// proxy/forward-h2.ts) with the same routing, 421, HSTS, metrics and access line.
import type { TLSSocket } from 'node:tls';
import type { Http2ServerRequest, Http2ServerResponse, Http2Session, IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Hsts } from '../state/types.ts';
import type { ProxyContext } from '../proxy/project-proxy.ts';
import { HttpError, sendError, type Response } from '../errors.ts';
import { accessLogger, type Logger } from '../log.ts';
import type { Metrics, RouteLabel } from '../metrics.ts';
import { hostnameFromHost, sniNamesAnother } from '../routing/hostname.ts';
import type { RouteTable } from '../routing/route.ts';
import type { ApiOutcome, ApiRequest } from '../api/v1.ts';
import type { Request } from '../api/body.ts';
import { clientIp, type Trust } from './client-ip.ts';
import { proxiedAddress } from './proxy-protocol.ts';
import { checkAuthority } from './request-target.ts';
import { notFoundPage, notDeployedPage, sendPage } from './pages.ts';
import type { StreamHandler } from './h2-stream.ts';
import type { StreamContext } from '../proxy/forward-h2.ts';
import { answerOn } from '../proxy/websocket-h1.ts';
import { answerMetrics, CLIENT_CLOSED, cutByStop, exchangeRecorder, STOPPED } from './exchanges.ts';

export interface ProjectProxy {
  web(req: Request, res: Response, upstream: string, ctx: ProxyContext): Promise<void>;
  /** `onEnd` once the visitor's connection has closed: the status it was answered, and whether that answer was cut short or never came */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, upstream: string, ctx: ProxyContext, onEnd: (status: number, aborted: boolean) => void): void;
  /** an HTTP/2 extended CONNECT (WebSocket) stream (proxy/websocket-h2.ts) */
  connect(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, upstream: string, ctx: ProxyContext): void;
  /** an HTTP/2 request on Node's core stream API (proxy/forward-h2.ts); never rejects */
  stream?(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, upstream: string, ctx: StreamContext): Promise<void>;
}

export interface EdgeDeps {
  routes: RouteTable;
  proxy: ProjectProxy;
  /** the port clients use for HTTPS; redirects name it unless it is 443 */
  publicHttpsPort: number;
  api: (req: Request, res: Response, request: ApiRequest) => Promise<void>;
  metrics: Metrics;
  log: Logger;
  trust: Trust;
}

/** `stream`: the HTTP/2 fast path, for the listener's serveStreams() (h2-stream.ts) */
export type Handler = ((req: Request, res: Response) => void) & { stream?: StreamHandler };

// The order of operations for one request on the HTTPS listener:
// 1. hostname from Host (HTTP/1.1) or :authority (HTTP/2), normalised;
// 2. a Host that differs from this connection's SNI → 421 (unless no SNI or an IP literal was sent);
// 3. route by hostname: API hosts → /v1 (auth → limit → operation, see api/v1.ts); a redirect domain →
//    its status to https://<to><same path and query>; a project's domain or default hostname → its
//    upstream (HSTS first when the domain opted in); anything else → 404 page;
// 4. errors become Error bodies: HttpError as it says, a state backend that is down → 503, else 500;
// 5. when the answer is finished: metrics and one access log line (never a key or Authorization).
export function createEdgeHandler(deps: EdgeDeps): Handler {
  const { routes, metrics, log, trust } = deps;
  const access = accessLogger(log);
  const recordAnswer = answerMetrics(metrics);
  const port = deps.publicHttpsPort === 443 ? '' : `:${deps.publicHttpsPort}`;
  // Host header → hostname: the same few values arrive again and again
  const hostnames = new Map<string, string>();
  const hostnameOf = (host: string | undefined): string => {
    if (host === undefined) return '';
    let hostname = hostnames.get(host);
    if (hostname === undefined) {
      hostname = hostnameFromHost(host);
      if (hostnames.size >= 10_000) hostnames.clear();
      hostnames.set(host, hostname);
    }
    return hostname;
  };
  // the client IP of HTTP/1.1 connections whose requests carry no X-Forwarded-For
  const peers = new WeakMap<object, string>();
  const handler: Handler = (req, res) => {
    const started = performance.now();
    const hostname = hostnameOf(req.headers.host ?? (req.headers[':authority'] as string | undefined));
    const socket = req.socket as TLSSocket;
    const forwardedFor = req.headers['x-forwarded-for'];
    // an HTTP/1.1 connection's peer does not change between its requests (HTTP/2's req.socket is a
    // new proxy object per stream: nothing to remember there)
    const samePeer = forwardedFor === undefined && req.httpVersionMajor === 1;
    let ip = samePeer ? peers.get(socket) : undefined;
    if (ip === undefined) {
      ip = clientIpOf(socket, forwardedFor, trust);
      if (samePeer) peers.set(socket, ip);
    }
    // what a stop that ran out of time cuts: the TLS connection, or the HTTP/2 session (a stream's
    // is gone once the stream is)
    const connection: object = req.httpVersionMajor === 2 ? ((req as unknown as Http2ServerRequest).stream.session ?? socket) : socket;
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    let routeLabel: RouteLabel = 'unknown';
    const outcome: ApiOutcome = {};

    let logged = false;
    const record = () => {
      if (logged) return;
      logged = true;
      const ms = performance.now() - started;
      // an answer cut short (the upstream failed mid-body, or the visitor left) never finishes: its
      // line says so, with the status the forwarder left on it (502/504 for an upstream failure); a
      // visitor gone before any answer went out is 499. A reset HTTP/2 stream counts as finished
      // (forward.ts), so its reset code says it was cut.
      const sent = res.headersSent && (res.writableFinished || !queued(req, res));
      const status = sent ? res.statusCode : cutByStop.has(connection) ? STOPPED : CLIENT_CLOSED;
      const rstCode = (res as Http2ServerResponse).stream?.rstCode;
      const aborted = sent && res.writableFinished && !rstCode ? undefined : true;
      recordAnswer(routeLabel, req.method, status, ms / 1000);
      access?.({
        method: req.method,
        hostname,
        path,
        route: routeLabel,
        status,
        durationMs: Math.round(ms * 10) / 10,
        clientIp: ip,
        protocol: req.httpVersion,
        accountId: outcome.accountId,
        aborted,
      });
    };
    // 'close' follows every answer, finished (a tick after 'finish') or cut short: one listener is enough
    res.on('close', record);

    if (misdirected(socket, hostname)) {
      sendError(res, 'misdirected_request', `This connection was opened for ${socket.servername}; open a new one for ${hostname || 'this host'}.`);
      return;
    }
    const route = routes.resolve(hostname);
    if (url === '*' && route.kind !== 'unknown') {
      // `OPTIONS *` asks about the server, not a resource (RFC 9110 §9.3.7): Portico answers it, as Go's
      // server and so Caddy do; passed on, it would reach the upstream as `OPTIONS /`, another question.
      // Any other method with `*` is malformed (RFC 9112 §3.2.4; over HTTP/1.1 refused already)
      routeLabel = route.kind === 'undeployed' ? 'project' : route.kind;
      if (req.method !== 'OPTIONS') return sendError(res, 'invalid_request', 'The target * is for OPTIONS only (RFC 9112 §3.2.4).');
      res.statusCode = 200;
      res.setHeader('content-length', 0);
      res.end();
      return;
    }
    if (route.kind === 'api') {
      routeLabel = 'api';
      if (path !== '/v1' && !path.startsWith('/v1/')) {
        sendError(res, 'not_found', `No route for ${path}; the API lives under /v1.`);
        return;
      }
      const request: ApiRequest = { environment: route.environment, clientIp: ip, path, query: q === -1 ? '' : url.slice(q), outcome };
      deps.api(req, res, request).catch((err) => fail(res, err, log));
      return;
    }
    if (route.kind === 'redirect') {
      routeLabel = 'redirect';
      if (route.hsts) res.setHeader('strict-transport-security', hstsHeader(route.hsts));
      res.statusCode = route.status;
      res.setHeader('location', `https://${route.to}${port}${url}`);
      res.setHeader('content-length', 0);
      res.end();
      return;
    }
    if (route.kind === 'project') {
      routeLabel = 'project';
      if (route.hsts) res.setHeader('strict-transport-security', hstsHeader(route.hsts));
      deps.proxy.web(req, res, route.upstream, { clientIp: ip, hostname, proto: 'https' }).catch((err) => fail(res, err, log));
      return;
    }
    if (route.kind === 'undeployed') {
      routeLabel = 'project';
      sendPage(res, 404, notDeployedPage(hostname));
      return;
    }
    sendPage(res, 404, notFoundPage(hostname));
  };

  // HTTP/2 requests to a project's hostname, the bulk of a browser's traffic, on the core stream API.
  // Everything else (the API, redirects, 404 and 421 pages, CONNECT, `Expect`, `OPTIONS *`) is declined before any
  // work and goes through the compatibility layer to the handler above.
  const sessionPeers = new WeakMap<Http2Session, string>();
  handler.stream = (stream, headers, flags, rawHeaders) => {
    const proxyStream = deps.proxy.stream;
    const session = stream.session;
    // a Host field that disagrees with :authority is the 'request' listener's 400 (request-target.ts)
    if (proxyStream === undefined || session === undefined || headers[':method'] === 'CONNECT' || headers.expect !== undefined || headers[':path'] === '*' || (headers.host !== undefined && checkAuthority(headers) !== null)) return false;
    const hostname = hostnameOf((headers.host ?? headers[':authority']) as string | undefined);
    const socket = session.socket as TLSSocket;
    if (misdirected(socket, hostname)) return false;
    const route = routes.resolve(hostname);
    if (route.kind !== 'project') return false;
    const started = performance.now();
    const forwardedFor = headers['x-forwarded-for'];
    let ip = forwardedFor === undefined ? sessionPeers.get(session) : undefined;
    if (ip === undefined) {
      ip = clientIpOf(socket, forwardedFor, trust);
      if (forwardedFor === undefined) sessionPeers.set(session, ip);
    }
    const method = headers[':method'];
    // `status`: set by the forwarder with the answer's HEADERS frame
    const ctx: StreamContext = { clientIp: ip, hostname, hsts: route.hsts ? hstsHeader(route.hsts) : undefined, rawHeaders, status: 0 };
    // a visitor resetting the stream must never become an uncaught 'error'
    stream.on('error', ignore);
    // as the compatibility layer's 'finish': once the stream is over, reset or not (499: the visitor
    // reset it, or its connection went, before any answer)
    stream.once('close', () => {
      const ms = performance.now() - started;
      const status = ctx.status || (cutByStop.has(session) ? STOPPED : CLIENT_CLOSED);
      recordAnswer('project', method, status, ms / 1000);
      if (access) {
        const url = headers[':path'] ?? '/';
        const q = url.indexOf('?');
        // a stream reset by either side (an upstream failure mid-answer, a visitor that cancelled) was cut short
        const aborted = ctx.status === 0 || (stream.rstCode !== undefined && stream.rstCode !== 0) ? true : undefined;
        access({ method, hostname, path: q === -1 ? url : url.slice(0, q), route: 'project', status, durationMs: Math.round(ms * 10) / 10, clientIp: ctx.clientIp, protocol: '2.0', accountId: undefined, aborted });
      }
    });
    void proxyStream(stream, headers, flags, route.upstream, ctx);
    return true;
  };
  return handler;
}

const ignore = () => undefined;

/**
 * HTTP/1.1 Upgrade requests (WebSockets) on the HTTPS listener, routed as any request: a project's
 * hostname (the connection's own, see 2. above) goes to its upstream (proxy/websocket-h1.ts), with one
 * count and one access line when the exchange is over: the status the visitor was answered (101 for
 * a WebSocket, written when it closes, its duration the WebSocket's lifetime; 499 when the visitor
 * left before any answer). Every other request (421, the API, a redirect domain, 404, and an HTTP/1.0
 * one, whose Upgrade is ignored) gets the answer the handler above gives it, with its count and line;
 * each answer says `Connection: close`, and the connection closes after it, as Node's server has
 * handed it over.
 */
export function createUpgradeHandler(deps: EdgeDeps): (req: IncomingMessage, socket: Duplex, head: Buffer) => void {
  const edge = createEdgeHandler(deps);
  const record = exchangeRecorder(deps.metrics, deps.log);
  return (req, socket, head) => {
    const started = performance.now();
    const hostname = hostnameFromHost(req.headers.host);
    const tlsSocket = req.socket as TLSSocket;
    const route = deps.routes.resolve(hostname);
    // RFC 9110 §7.8: a server ignores Upgrade in an HTTP/1.0 request, which is then a plain one
    if (route.kind !== 'project' || misdirected(tlsSocket, hostname) || req.httpVersionMinor === 0) {
      socket.on('error', () => socket.destroy());
      edge(req, answerOn(req, socket));
      return;
    }
    const ip = clientIpOf(tlsSocket, req.headers['x-forwarded-for'], deps.trust);
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    deps.proxy.upgrade(req, socket, head, route.upstream, { clientIp: ip, hostname, proto: 'https' }, (status, aborted) => record({
      method: req.method,
      hostname,
      path: q === -1 ? url : url.slice(0, q),
      route: 'project',
      status,
      durationMs: performance.now() - started,
      clientIp: ip,
      protocol: req.httpVersion,
      accountId: undefined,
      aborted: aborted ? true : undefined,
    }));
  };
}

/**
 * An unfinished HTTP/1.1 answer that never had the connection: answers go in request order (RFC 9112
 * §9.3.2), so Node's server gives a pipelined request's answer no socket (res.socket null) while an
 * earlier one is being written, and keeps what it writes (its head too: headersSent is true) in the
 * answer's own buffer. assignSocket() hands the connection over, and that buffer to it, once the earlier
 * answer finishes; a connection that closes first destroys the waiting answers with it, nothing of them
 * sent. An answer that had the connection keeps res.socket until it finishes (Node detaches the socket
 * only then); over HTTP/2 no answer waits for another.
 */
function queued(req: Request, res: Response): boolean {
  return req.httpVersionMajor === 1 && (res as ServerResponse).socket === null;
}

/** The Host names another site than this connection's SNI (no SNI, or an IP literal SNI: Host decides). */
function misdirected(socket: TLSSocket, hostname: string): boolean {
  return sniNamesAnother(socket.servername, hostname);
}

/** The TCP peer (or its PROXY protocol source), then X-Forwarded-For when that peer is trusted. */
function clientIpOf(socket: TLSSocket, forwardedFor: string | string[] | undefined, trust: Trust): string {
  return clientIp(proxiedAddress(socket)?.address ?? socket.remoteAddress ?? '', forwardedFor, trust);
}

function hstsHeader(hsts: Hsts): string {
  return `max-age=${hsts.maxAge}${hsts.includeSubDomains ? '; includeSubDomains' : ''}${hsts.preload ? '; preload' : ''}`;
}

export function fail(res: Response, err: unknown, log: Logger): void {
  const code = (err as { code?: string }).code;
  if (res.headersSent) {
    log.warn({ err }, 'request failed after the answer had started');
    (res as { destroy(): void }).destroy();
    return;
  }
  if (err instanceof HttpError) sendError(res, err.code, err.message, err.headers);
  else if (code === 'STATE_UNAVAILABLE' || code === 'REDIS_DOWN') sendError(res, 'service_unavailable', 'The state store cannot be reached or written just now; try again shortly.', { 'retry-after': '5' });
  else {
    log.error({ err }, 'request failed');
    sendError(res, 'internal_error');
  }
}
