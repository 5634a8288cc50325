// CONNECT on the HTTPS listener. Over HTTP/2 the listener advertises SETTINGS_ENABLE_CONNECT_PROTOCOL
// (RFC 8441 §3), so a browser holding an h2 connection opens its WebSockets on it as extended CONNECT
// streams (`:protocol: websocket`); they follow the rules of an HTTP/1.1 upgrade:
// 1. a plain CONNECT (no :protocol) is a forward proxy's tunnel: Portico is none → 405;
// 2. a :protocol other than websocket → 501 (RFC 8441 §4 defines only what websocket means);
// 3. a Host field naming another site than :authority → 400 (RFC 9113 §8.3.1, request-target.ts);
//    hostname from :authority; another name than the connection's SNI → 421;
// 4. a project's hostnames pass through (the upstream bridge, proxy/websocket-h2.ts); every other
//    hostname (the API, a redirect domain, an unknown one) gets what the edge handler answers any
//    request to it, with its count and line (the API's 401 or 405, a redirect's 308, the 404 page),
//    as an HTTP/1.1 upgrade does;
// 5. once the stream is over: one count and one access line, as for any request (pipeline.ts), with
//    the status it was answered (200: the WebSocket opened, and the line is written when it closes,
//    its duration the WebSocket's lifetime) and the route label of :authority's hostname from 4. on;
//    1.–3. refuse before routing, so `unknown` (as for other requests refused before routing). A
//    stream the visitor reset, or whose connection went, before any answer: 499 (nginx's and
//    Traefik's "client closed request"), aborted.
import http2, { type ServerHttp2Stream, type Http2ServerRequest, type Http2ServerResponse } from 'node:http2';
import type { TLSSocket } from 'node:tls';
import type { RouteLabel } from '../metrics.ts';
import type { Route } from '../routing/route.ts';
import { hostnameFromHost, sniNamesAnother } from '../routing/hostname.ts';
import { clientIp, type Trust } from './client-ip.ts';
import { proxiedAddress } from './proxy-protocol.ts';
import { checkAuthority } from './request-target.ts';
import { createEdgeHandler, type EdgeDeps } from './pipeline.ts';
import { CLIENT_CLOSED, exchangeRecorder } from './exchanges.ts';

/** Node's compatibility layer hands a CONNECT stream over as a request and its response */
export type ConnectHandler = (req: Http2ServerRequest, res: Http2ServerResponse) => void;

export function createConnectHandler(deps: EdgeDeps): ConnectHandler {
  const record = exchangeRecorder(deps.metrics, deps.log);
  const edge = createEdgeHandler(deps);
  return (req, res) => {
    const { stream, headers } = req;
    const started = performance.now();
    // a visitor resetting the stream must never become an uncaught 'error'
    stream.on('error', ignore);
    const hostname = hostnameFromHost(headers[':authority'] as string | undefined);
    const socket = stream.session?.socket as TLSSocket | undefined;
    const ip = socket ? clientIp(proxiedAddress(socket)?.address ?? socket.remoteAddress ?? '', headers['x-forwarded-for'], deps.trust) : '';
    let routeLabel: RouteLabel = 'unknown';
    // 4.: a request the edge handler answers is counted and logged there
    let answeredByEdge = false;
    stream.once('close', () => {
      if (answeredByEdge) return;
      const sent = stream.sentHeaders?.[':status'];
      const url = (headers[':path'] as string | undefined) ?? '';
      const q = url.indexOf('?');
      record({
        method: 'CONNECT',
        hostname,
        path: q === -1 ? url : url.slice(0, q),
        route: routeLabel,
        status: sent === undefined ? CLIENT_CLOSED : Number(sent),
        durationMs: performance.now() - started,
        clientIp: ip,
        protocol: '2.0',
        accountId: undefined,
        // never answered, or reset by either side (a WebSocket cut rather than closed)
        aborted: sent === undefined || (stream.rstCode !== undefined && stream.rstCode !== http2.constants.NGHTTP2_NO_ERROR) ? true : undefined,
      });
    });
    const protocol = headers[':protocol'];
    // Allow is required on a 405 (RFC 9110 §15.5.6); empty, as over HTTP/1.1 (http1-upgrades.ts)
    if (protocol === undefined) return refuse(stream, 405, { allow: '' });
    if (String(protocol).toLowerCase() !== 'websocket') return refuse(stream, 501);
    if (checkAuthority(headers) !== null) return refuse(stream, 400);
    if (!socket) return;
    const sni = socket.servername;
    // the same rule as an HTTP/1.1 request's Host (pipeline.ts): no SNI or an IP literal SNI → :authority decides
    if (sniNamesAnother(sni, hostname)) return refuse(stream, 421);
    const route = deps.routes.resolve(hostname);
    routeLabel = labelOf(route);
    if (route.kind !== 'project') {
      answeredByEdge = true;
      return edge(req, res);
    }
    deps.proxy.connect(stream, headers, route.upstream, { clientIp: ip, hostname, proto: 'https' });
  };
}

/** the metrics' route label of a hostname's route (a project not deployed yet is still a project's) */
function labelOf(route: Route): RouteLabel {
  if (route.kind === 'undeployed') return 'project';
  return route.kind;
}

function refuse(stream: ServerHttp2Stream, status: number, fields: Record<string, string> = {}): void {
  if (stream.destroyed || stream.headersSent) return;
  stream.respond({ ':status': status, 'content-length': 0, ...fields }, { endStream: true });
}

const ignore = () => undefined;
