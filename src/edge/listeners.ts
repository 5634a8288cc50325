// The three listeners — HTTPS (HTTP/2 + HTTP/1.1 by ALPN), plain HTTP, admin — plus the optional
// metrics listener, with the timeouts that keep slow clients from holding sockets, and a graceful
// close: stop accepting, let in-flight requests finish (bounded), then cut what is left. The TLS
// settings are in tls-options.ts, the connections a close follows in tls-connections.ts, and what
// the HTTPS listener does with HTTP/1.1 Upgrade and CONNECT in http1-upgrades.ts.
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import type { SecureContext } from 'node:tls';
import type { Config } from '../config.ts';
import type { Metrics } from '../metrics.ts';
import type { KeyPair } from '../certs/fallback.ts';
import type { Handler } from './pipeline.ts';
import { acceptProxyProtocol } from './proxy-protocol.ts';
import { checkAuthority, checkTarget } from './request-target.ts';
import { serveStreams } from './h2-stream.ts';
import type { ConnectHandler } from './extended-connect.ts';
import { H2_LIMITS, H2_SETTINGS, limitSession } from './h2-limits.ts';
import { sendError } from '../errors.ts';
import type { Trust } from './client-ip.ts';
import type { Logger } from '../log.ts';
import { refusalRecorder } from './before-routing.ts';
import { answerClientError, bindFailure, continueWhenRead } from './http1-answers.ts';
import type { OcspStapler } from '../certs/ocsp.ts';
import { tlsOptions } from './tls-options.ts';
import { trackConnections } from './tls-connections.ts';
import { serveUpgrades } from './http1-upgrades.ts';

export { CIPHERS, TLS13_SUITES } from './tls-options.ts';

type PlainHandler = (req: http.IncomingMessage, res: http.ServerResponse) => void;

/** Read at every request, so a reload can swap them while connections stay open. */
export interface ListenerHandlers {
  edge: Handler;
  upgrade: (req: http.IncomingMessage, socket: Duplex, head: Buffer) => void;
  /** HTTP/2 CONNECT streams: WebSockets by extended CONNECT (RFC 8441) */
  connect: ConnectHandler;
  http: PlainHandler;
  admin: PlainHandler;
  metricsOnly: PlainHandler;
}

export interface ListenerDeps {
  config: Config;
  fallback: KeyPair;
  /** the SecureContext for a servername, or null for the fallback certificate */
  secureContext(servername: string): Promise<SecureContext | null>;
  handlers: ListenerHandlers;
  /** staples OCSP responses for certificates that name a responder */
  ocsp: OcspStapler;
  metrics: Metrics;
  /** for the access lines of what is answered before routing */
  log: Logger;
  trust: Trust;
}

export interface Listeners {
  listen(): Promise<void>;
  /** bound ports, useful when configured as 0 */
  ports(): { http: number; https: number; admin: number; metrics: number | null };
  /** the bound addresses of the HTTPS and HTTP listeners */
  addresses(): { https: net.AddressInfo; http: net.AddressInfo };
  setTrust(trust: Trust): void;
  setTimeouts(timeouts: Config['timeouts']): void;
  setFallback(fallback: KeyPair): void;
  /** the session ticket key shared by every worker and instance */
  setTicketKeys(key: Buffer): void;
  close(graceMs: number): Promise<void>;
}

export function createListeners(deps: ListenerDeps): Listeners {
  const { config, metrics, handlers } = deps;
  let t = config.timeouts;
  let trust = deps.trust;
  /** the shared session ticket key, once known */
  let ticketKey: Buffer | null = null;
  const secureOptions = tlsOptions(config.https.keyExchange);
  const https = http2.createSecureServer({
    allowHTTP1: true,
    // http.createServer turns Nagle off for its sockets, http2.createSecureServer does not: an answer
    // written in two pieces (head, then body or the last chunk) waited for the client's delayed ACK,
    // ~40 ms, which was the whole p99 of the proxy under keep-alive load
    noDelay: true,
    key: deps.fallback.key,
    cert: deps.fallback.cert,
    ...secureOptions,
    handshakeTimeout: Math.min(t.headersMs, 10_000),
    // what one HTTP/2 connection may make Portico do, and SETTINGS_ENABLE_CONNECT_PROTOCOL (h2-limits.ts)
    ...H2_LIMITS,
    settings: H2_SETTINGS,
    SNICallback: (servername, done) => {
      deps.secureContext(servername).then((context) => done(null, context ?? undefined), (err) => done(err as Error));
    },
  });
  // HTTP/1.1 connections on the HTTPS listener go through Node's http1 machinery, which honours these
  // (checked every connectionsCheckingInterval: Node's 30 s default would let a slow client keep a socket that long)
  const checkEvery = Math.max(100, Math.min(1000, Math.floor(t.headersMs / 2)));
  // a request without Host is refused by checkTarget, with a body saying so (Node's own 400 has none)
  Object.assign(https, { headersTimeout: t.headersMs, requestTimeout: t.requestMs, keepAliveTimeout: t.keepAliveMs, connectionsCheckingInterval: checkEvery, requireHostHeader: false });
  // an HTTP/2 session with no activity at all for this long is closed
  https.setTimeout(Math.max(t.keepAliveMs, t.requestMs));
  https.on('OCSPRequest', deps.ocsp.onRequest);
  https.on('secureConnection', () => metrics.tlsHandshakes.inc({ result: 'success' }));
  https.on('tlsClientError', () => metrics.tlsHandshakes.inc({ result: 'failure' }));

  const tracked = trackConnections(https, () => t.headersMs);
  // the trust of now: a reload can change it (setTrust)
  const beforeRouting = refusalRecorder(metrics, deps.log, (address) => trust(address));
  https.on('session', (session: http2.ServerHttp2Session) =>
    limitSession(session, { streamIdleMs: () => t.requestMs, onAbuse: (reason) => metrics.http2Abuse.inc({ reason }) }),
  );
  https.on('request', (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => {
    const h1 = req.httpVersionMajor !== 2;
    if (h1) {
      tracked.request(req, res);
      if (tracked.draining) res.setHeader('connection', 'close');
    }
    const problem = h1 ? checkTarget(req as unknown as http.IncomingMessage) : checkAuthority(req.headers);
    if (problem !== null) {
      const record = beforeRouting(req);
      // 'close' follows every answer, finished or cut short (as in the pipeline)
      res.once('close', () => record(res));
      sendError(res, 'invalid_request', problem, h1 ? { connection: 'close' } : undefined);
      return;
    }
    handlers.edge(req, res);
  });
  // HTTP/2 streams to a project on Node's core stream API; the others reach 'request' and 'connect'
  serveStreams(https, () => handlers.edge.stream);
  // HTTP/1.1 Upgrade and CONNECT, and HTTP/2 CONNECT streams (http1-upgrades.ts)
  serveUpgrades(https, handlers, tracked, beforeRouting);

  const plain = (handler: () => PlainHandler) =>
    http.createServer({ headersTimeout: t.headersMs, requestTimeout: t.requestMs, keepAliveTimeout: t.keepAliveMs, connectionsCheckingInterval: checkEvery, requireHostHeader: false }, (req, res) => handler()(req, res));
  const httpServer = plain(() => handlers.http);
  const admin = plain(() => handlers.admin);
  const metricsServer = config.metrics.port !== null ? plain(() => handlers.metricsOnly) : null;
  for (const server of [https, httpServer, admin, metricsServer]) {
    server?.on('clientError', answerClientError);
    if (server) continueWhenRead(server);
  }

  // with PROXY protocol on, the edge listeners accept raw TCP, read the header, then hand over
  const front = (server: net.Server) => (config.proxyProtocol ? acceptProxyProtocol(server, { trusted: (address) => trust(address) }) : server);
  const httpsFront = front(https);
  const httpFront = front(httpServer);

  // listen.host unset: no host given to listen(), so Node binds `::` with IPv4 mapped in where the
  // machine has IPv6, else 0.0.0.0 (every interface either way)
  const edgeHost = config.listen.host ?? undefined;
  // admin.host 0.0.0.0 has always meant every interface, IPv6 too
  const adminHost = config.admin.host === '0.0.0.0' ? undefined : config.admin.host;
  const bound: Array<[string, net.Server, number, string | undefined]> = [
    ['https', httpsFront, config.https.port, edgeHost],
    ['http', httpFront, config.http.port, edgeHost],
    ['admin', admin, config.admin.port, adminHost],
  ];
  if (metricsServer) bound.push(['metrics', metricsServer, config.metrics.port!, adminHost]);

  return {
    async listen() {
      for (const [name, server, port, host] of bound) {
        await new Promise<void>((resolve, reject) => {
          const failed = (err: NodeJS.ErrnoException) => {
            const where = host === undefined ? `port ${port}` : `${host.includes(':') ? `[${host}]` : host}:${port}`;
            reject(new Error(`the ${name} listener cannot bind ${where}`, { cause: bindFailure(err) }));
          };
          server.once('error', failed);
          server.listen(port, host, () => {
            server.off('error', failed);
            resolve();
          });
        });
      }
    },
    ports() {
      const port = (s: net.Server | null) => (s ? (s.address() as net.AddressInfo).port : null);
      return { https: port(httpsFront)!, http: port(httpFront)!, admin: port(admin)!, metrics: port(metricsServer) };
    },
    addresses() {
      return { https: httpsFront.address() as net.AddressInfo, http: httpFront.address() as net.AddressInfo };
    },
    setTrust(next) {
      trust = next;
    },
    setTimeouts(next) {
      t = next;
      for (const server of [https, httpServer, admin, metricsServer]) {
        if (server) Object.assign(server, { headersTimeout: next.headersMs, requestTimeout: next.requestMs, keepAliveTimeout: next.keepAliveMs });
      }
      https.setTimeout(Math.max(next.keepAliveMs, next.requestMs));
    },
    setTicketKeys(key) {
      ticketKey = key;
      https.setTicketKeys(key);
    },
    setFallback(next) {
      https.setSecureContext({ ...secureOptions, key: next.key, cert: next.cert });
      // a new secure context comes with random ticket keys: put the shared one back, or tickets
      // issued before would stop resuming (on every worker and instance) until the next period
      if (ticketKey) https.setTicketKeys(ticketKey);
    },
    async close(graceMs) {
      const closing = bound.map(([, server]) => new Promise<void>((resolve) => server.close(() => resolve())));
      if (httpsFront !== https) https.close();
      if (httpFront !== httpServer) httpServer.close();
      tracked.drain();
      for (const server of [httpServer, admin, metricsServer]) server?.closeIdleConnections();
      const timer = setTimeout(() => {
        tracked.destroyAll();
        for (const server of [httpServer, admin, metricsServer]) server?.closeAllConnections();
      }, graceMs);
      await Promise.all(closing);
      clearTimeout(timer);
    },
  };
}
