// CONNECT on the HTTPS listener. Over HTTP/2 the listener advertises SETTINGS_ENABLE_CONNECT_PROTOCOL
// (RFC 8441 §3), so a browser holding an h2 connection opens its WebSockets on it as extended CONNECT
// streams (`:protocol: websocket`); they follow the rules of an HTTP/1.1 upgrade:
// 1. a plain CONNECT (no :protocol) is a forward proxy's tunnel: Portico is none → 405;
// 2. a :protocol other than websocket → 501 (RFC 8441 §4 defines only what websocket means);
// 3. a Host field naming another site than :authority → 400 (RFC 9113 §8.3.1, request-target.ts);
//    hostname from :authority; another name than the connection's SNI → 421;
// 4. only a project's hostnames pass through (the upstream bridge, proxy/websocket-h2.ts); else 404.
import type { ServerHttp2Stream, IncomingHttpHeaders } from 'node:http2';
import type { TLSSocket } from 'node:tls';
import type { Metrics } from '../metrics.ts';
import type { RouteTable } from '../routing/route.ts';
import type { ProxyContext } from '../proxy/project-proxy.ts';
import { hostnameFromHost, isIpLiteral } from '../routing/hostname.ts';
import { clientIp, type Trust } from './client-ip.ts';
import { proxiedAddress } from './proxy-protocol.ts';
import { checkAuthority } from './request-target.ts';

export interface ConnectDeps {
  routes: RouteTable;
  proxy: { connect(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, upstream: string, ctx: ProxyContext): void };
  metrics: Metrics;
  trust: Trust;
}

export type ConnectHandler = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => void;

export function createConnectHandler(deps: ConnectDeps): ConnectHandler {
  return (stream, headers) => {
    // a visitor resetting the stream must never become an uncaught 'error'
    stream.on('error', () => undefined);
    // counted once the stream is over, with the status it was answered (200: the WebSocket opened)
    stream.once('close', () => {
      const status = stream.sentHeaders?.[':status'];
      if (status !== undefined) deps.metrics.httpRequests.inc({ route: 'project', method: 'CONNECT', status: Number(status) });
    });
    const protocol = headers[':protocol'];
    if (protocol === undefined) return refuse(stream, 405);
    if (String(protocol).toLowerCase() !== 'websocket') return refuse(stream, 501);
    if (checkAuthority(headers) !== null) return refuse(stream, 400);
    const hostname = hostnameFromHost(headers[':authority'] as string | undefined);
    const socket = stream.session?.socket as TLSSocket | undefined;
    if (!socket) return;
    const sni = socket.servername;
    // the same rule as an HTTP/1.1 request's Host (pipeline.ts): no SNI or an IP literal SNI → :authority decides
    if (sni && sni !== hostname && !isIpLiteral(sni) && sni.toLowerCase() !== hostname) return refuse(stream, 421);
    const route = deps.routes.resolve(hostname);
    if (route.kind !== 'project') return refuse(stream, 404);
    const ip = clientIp(proxiedAddress(socket)?.address ?? socket.remoteAddress ?? '', headers['x-forwarded-for'], deps.trust);
    deps.proxy.connect(stream, headers, route.upstream, { clientIp: ip, hostname, proto: 'https' });
  };
}

function refuse(stream: ServerHttp2Stream, status: number): void {
  if (stream.destroyed || stream.headersSent) return;
  stream.respond({ ':status': status, 'content-length': 0 }, { endStream: true });
}
