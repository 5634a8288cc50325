// The three listeners — HTTPS (HTTP/2 + HTTP/1.1 by ALPN), plain HTTP, admin — plus the optional
// metrics listener, with the timeouts that keep slow clients from holding sockets, and a graceful
// close: stop accepting, let in-flight requests finish (bounded), then cut what is left.
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { createSecureContext, type TLSSocket, type SecureContext } from 'node:tls';
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
import { afterEarlierAnswers, answerOn } from '../proxy/websocket-h1.ts';
import type { Trust } from './client-ip.ts';
import type { Logger } from '../log.ts';
import { refusalRecorder } from './before-routing.ts';
import { answerClientError, bindFailure, continueWhenRead } from './http1-answers.ts';
import { cutByStop } from './exchanges.ts';
import { hostnameFromHost } from '../routing/hostname.ts';
import type { OcspStapler } from '../certs/ocsp.ts';

// Mozilla "intermediate": TLS 1.2 with AEAD + forward secrecy only; TLS 1.3 suites are all AEAD.
// The server's order decides (honorCipherOrder), in TLS 1.3 too: AES-128-GCM first, as Mozilla's list
// and Go (so Caddy and Traefik) do. Node's own TLS 1.3 default starts at AES-256-GCM-SHA384, which
// clients built on OpenSSL (curl, wrk, Node, Python) also list first: its SHA-384 transcript and key
// schedule cost ~27 µs more server CPU per full handshake here, and its bulk encryption more per byte.
// The bench gives its anchors the same order (bench/lib/nginx.ts, bench/bare-*.ts).
export const TLS13_SUITES = 'TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256';
export const CIPHERS = [
  TLS13_SUITES,
  'ECDHE-ECDSA-AES128-GCM-SHA256', 'ECDHE-RSA-AES128-GCM-SHA256', 'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384', 'ECDHE-ECDSA-CHACHA20-POLY1305', 'ECDHE-RSA-CHACHA20-POLY1305',
].join(':');

// Key exchange by default (https.keyExchange replaces it): the hybrid post-quantum X25519MLKEM768
// first, as current browsers and Caddy do (a connection recorded today cannot be decrypted later by a
// quantum computer), then X25519 and the NIST curves for every other client. A Node whose OpenSSL
// lacks ML-KEM (before 3.5) gets the classical list.
const CLASSICAL_GROUPS = 'X25519:P-256:P-384';
function keyExchangeGroups(): string {
  const hybrid = `X25519MLKEM768:${CLASSICAL_GROUPS}`;
  try {
    createSecureContext({ ecdhCurve: hybrid });
    return hybrid;
  } catch {
    return CLASSICAL_GROUPS;
  }
}

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
  const secureOptions = { minVersion: 'TLSv1.2' as const, ciphers: CIPHERS, honorCipherOrder: true, ecdhCurve: config.https.keyExchange?.join(':') ?? keyExchangeGroups() };
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
  const beforeRouting = refusalRecorder(metrics, deps.log, trust);
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
  // HTTP/1.1 Upgrade (WebSocket) requests on the HTTPS listener. Node hands the connection over at
  // once, also behind pipelined requests still being answered: the upgrade waits for their answers
  // (proxy/websocket-h1.ts afterEarlierAnswers), then is refused here or routed (pipeline.ts).
  https.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    tracked.upgrade(socket);
    // Node took its own 'error' listener off the connection: a reset while the upgrade waits, or
    // while its refusal is written, must not become an uncaught 'error'
    socket.on('error', () => socket.destroy());
    const record = beforeRouting(req);
    let routed = false;
    let refusal: http.ServerResponse | undefined;
    // a refusal's line when the connection has closed after it, as for the project's refusals; or a
    // visitor gone before its turn came, never answered (499)
    socket.once('close', () => {
      if (!routed) record(refusal);
    });
    afterEarlierAnswers(socket, () => {
      const problem = checkTarget(req);
      if (problem === null) {
        routed = true;
        handlers.upgrade(req, socket, head);
        return;
      }
      // the same answer as a request refused here (above), then the connection closes
      refusal = answerOn(req, socket);
      sendError(refusal, 'invalid_request', problem, { connection: 'close' });
    });
  });
  // CONNECT: Node's compat layer emits it for HTTP/2 streams (request, response) and its HTTP/1.1
  // parser for HTTP/1.1 requests (request, socket). Over HTTP/1.1 Portico is no forward proxy: 405,
  // in its turn behind pipelined requests as an upgrade, counted and logged as a refusal before
  // routing (hostname from the authority-form target, as :authority over HTTP/2; no path). Its
  // `Allow` is empty (RFC 9110 §10.2.1, required on a 405 by §15.5.6): a host:port target is no
  // resource Portico serves by any method.
  https.on('connect', (req: http2.Http2ServerRequest | http.IncomingMessage, second: http2.Http2ServerResponse | Duplex) => {
    if (req instanceof http2.Http2ServerRequest) {
      handlers.connect(req, second as http2.Http2ServerResponse);
      return;
    }
    const socket = second as Duplex;
    tracked.upgrade(socket);
    socket.on('error', () => socket.destroy());
    const record = beforeRouting(req, { hostname: hostnameFromHost(req.url), path: '' });
    let refusal: http.ServerResponse | undefined;
    socket.once('close', () => record(refusal));
    afterEarlierAnswers(socket, () => {
      refusal = answerOn(req, socket);
      refusal.writeHead(405, { allow: '', 'content-length': 0 });
      refusal.end();
    });
  });

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

/**
 * Follows TLS connections of the HTTPS listener so a shutdown can close them gently, then firmly.
 * Also gives HTTP/1.1 connections a deadline for their request headers: behind allowHTTP1, Node does
 * not enforce headersTimeout, so a client trickling header bytes (slowloris) would keep its socket.
 */
function trackConnections(server: http2.Http2SecureServer, headersMs: () => number) {
  const sockets = new Set<TLSSocket>();
  const sessions = new Set<http2.ServerHttp2Session>();
  // per HTTP/1.1 connection: requests in flight, and one timer re-armed with refresh() (cheaper
  // than a new timer per request); it fires harmlessly while a request is in flight
  type Connection = { busy: number; deadline: NodeJS.Timeout; done: () => void; tunnel?: true };
  const connections = new WeakMap<TLSSocket, Connection>();
  const state = {
    draining: false,
    /** An HTTP/1.1 request on the listener: in flight until its answer closes. */
    request(req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) {
      const connection = connections.get(req.socket as TLSSocket);
      if (!connection) return;
      connection.busy++;
      // the connection's one listener function: no closure and no once() wrapper per request
      res.on('close', connection.done);
    },
    /**
     * An HTTP/1.1 Upgrade (or CONNECT) request: from here the connection is a tunnel (or is closed
     * after the refusal), not a keep-alive connection waiting for request headers, so the headers
     * deadline no longer applies, and a stop leaves it its shutdown time, as a WebSocket over HTTP/2
     * has. Pipelined behind requests still being answered, it takes the connection over once their
     * answers are out: the last of them ending it during a stop would cut it
     */
    upgrade(socket: Duplex) {
      const connection = connections.get(socket as TLSSocket);
      if (!connection) return;
      connection.tunnel = true;
      clearTimeout(connection.deadline);
    },
    drain() {
      state.draining = true;
      for (const session of sessions) session.close();
      for (const socket of sockets) {
        const connection = connections.get(socket);
        if (socket.alpnProtocol !== 'h2' && !connection?.busy && !connection?.tunnel) socket.destroy();
      }
    },
    destroyAll() {
      for (const session of sessions) {
        cutByStop.add(session);
        session.destroy();
      }
      for (const socket of sockets) {
        cutByStop.add(socket);
        socket.destroy();
      }
    },
  };
  server.on('secureConnection', (socket: TLSSocket) => {
    sockets.add(socket);
    const connection: Connection | null = socket.alpnProtocol === 'h2'
      ? null
      : {
          busy: 0,
          deadline: setTimeout(() => connection!.busy === 0 && socket.destroy(), headersMs()).unref(),
          done: () => {
            if (--connection!.busy > 0 || connection!.tunnel) return;
            if (state.draining) socket.end();
            else connection!.deadline.refresh();
          },
        };
    if (connection) connections.set(socket, connection);
    socket.once('close', () => {
      sockets.delete(socket);
      if (connection) clearTimeout(connection.deadline);
    });
  });
  server.on('session', (session: http2.ServerHttp2Session) => {
    sessions.add(session);
    session.once('close', () => sessions.delete(session));
  });
  return state;
}
