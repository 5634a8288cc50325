// WebSockets over HTTP/2 (RFC 8441): an extended CONNECT stream (`:protocol: websocket`) is bridged
// to the project's upstream as an HTTP/1.1 Upgrade (RFC 6455 §4.1), since upstreams speak HTTP/1.1.
// The WebSocket frames themselves are the same bytes on both sides (RFC 8441 §5: masking and
// extensions unchanged), so after the handshake the bridge copies bytes, with back-pressure.
//
// 1. the upstream request: GET <base path + :path>, Host = the upstream's own, X-Forwarded-* set by
//    Portico, pseudo-headers, hop-by-hop and client-sent forwarding headers dropped (as for an
//    HTTP/1.1 upgrade), and a fresh Sec-WebSocket-Key, since an h2 client sends none (RFC 8441 §5);
// 2. 101 with the matching Sec-WebSocket-Accept → the stream answers 200 with the upstream's
//    Sec-WebSocket-Protocol / -Extensions; any other answer → the stream gets its status (a 2xx
//    that is no upgrade → 502), so the page sees a failed WebSocket, and the upstream connection is
//    closed (its body is not forwarded, and may never end);
// 3. refused or reset → 502, no answer within `timeoutMs` → 504;
// 4. closing (RFC 8441 §5): a clean end on one side (TCP FIN, END_STREAM) ends the other; a reset
//    or error (RST_STREAM, a broken socket) cuts the other with CANCEL / destroy. A side that does
//    not follow within `closeGraceMs` is cut;
// 5. while a WebSocket is open on an h2 connection, the connection's idle timeout is paused: a quiet
//    WebSocket lives as long as over HTTP/1.1 (and as Caddy and Traefik keep them).
import http from 'node:http';
import https from 'node:https';
import http2 from 'node:http2';
import net from 'node:net';
import { createHash, randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { MAX_INTERIM } from './http1-connection.ts';

const { NGHTTP2_CANCEL } = http2.constants;
// RFC 6455 §1.3
const WEBSOCKET_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
// the upstream's answer headers a WebSocket client needs to see (RFC 6455 §4.2.2)
const ANSWER_HEADERS = ['sec-websocket-protocol', 'sec-websocket-extensions'] as const;

export interface BridgeOptions {
  /** connect + the upstream's answer to the upgrade */
  timeoutMs: number;
  /** how long one side may stay open after the other has ended */
  closeGraceMs: number;
  onError(): void;
  /** the upstream socket, once upgraded: the caller may destroy it at shutdown */
  onOpen(socket: Duplex): void;
}

/**
 * `headers` are the client's request headers already filtered (no pseudo-headers, hop-by-hop or
 * client forwarding headers), with Host and X-Forwarded-* set for this upstream.
 */
export function bridgeWebSocket(stream: http2.ServerHttp2Stream, target: URL, headers: Record<string, string | string[]>, options: BridgeOptions): void {
  const key = randomBytes(16).toString('base64');
  const accept = createHash('sha1').update(key + WEBSOCKET_GUID).digest('base64');
  const secure = target.protocol === 'https:';
  const hostname = target.hostname.startsWith('[') ? target.hostname.slice(1, -1) : target.hostname;
  const request = (secure ? https : http).request({
    host: hostname,
    port: target.port || (secure ? 443 : 80),
    path: target.pathname + target.search,
    method: 'GET',
    headers: { ...headers, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-key': key, 'sec-websocket-version': String(headers['sec-websocket-version'] ?? '13') },
    agent: false,
    // an https upstream's certificate is verified for its own name (Node's CAs + NODE_EXTRA_CA_CERTS)
    ...(secure && net.isIP(hostname) === 0 ? { servername: hostname } : {}),
  });
  let settled = false;
  const timer = setTimeout(() => fail(504), options.timeoutMs);
  const answer = (status: number) => {
    if (stream.destroyed || stream.headersSent) return;
    stream.respond({ ':status': status, 'content-length': 0 }, { endStream: true });
  };
  function fail(status: number) {
    if (settled) return;
    settled = true;
    clearTimeout(timer);
    request.destroy();
    options.onError();
    answer(status);
  }
  // the visitor left (RST_STREAM, connection gone) before the upstream answered
  stream.once('close', () => {
    if (settled) return;
    settled = true;
    clearTimeout(timer);
    request.destroy();
  });
  request.on('error', () => fail(502));
  // at most MAX_INTERIM 1xx answers before the 101, as for forwarded requests (http1-connection.ts)
  let interim = 0;
  request.on('information', () => {
    if (++interim > MAX_INTERIM) fail(502);
  });
  request.on('response', (res) => {
    // settled before: the request is destroyed already
    if (settled) return;
    settled = true;
    clearTimeout(timer);
    const status = res.statusCode ?? 502;
    // a success that is no upgrade would read as an open WebSocket to the client: it is not one
    if (status < 300) options.onError();
    answer(status < 300 ? 502 : status);
    // the refusal's body is not forwarded (the stream is answered with its status alone), and an
    // upstream that never finishes it must not keep the connection: closed once the status is sent
    request.destroy();
  });
  request.on('upgrade', (res, socket: net.Socket, head: Buffer) => {
    if (settled) {
      socket.destroy();
      return;
    }
    settled = true;
    clearTimeout(timer);
    if (res.headers['sec-websocket-accept'] !== accept || res.headers.upgrade?.toLowerCase() !== 'websocket') {
      socket.destroy();
      options.onError();
      answer(502);
      return;
    }
    if (stream.destroyed) {
      socket.destroy();
      return;
    }
    const answerHeaders: http2.OutgoingHttpHeaders = { ':status': 200 };
    for (const name of ANSWER_HEADERS) if (res.headers[name] !== undefined) answerHeaders[name] = res.headers[name];
    stream.respond(answerHeaders);
    options.onOpen(socket);
    join(stream, socket, head, options.closeGraceMs);
  });
  request.end();
}

// per h2 connection: its WebSockets open, and the idle timeout to restore when the last one closes
const holds = new WeakMap<http2.Http2Session, { open: number; idleMs: number }>();

/** Pauses the connection's idle timeout while a WebSocket is open on it (5.); the returned function ends that. */
function holdSession(session: http2.Http2Session): () => void {
  let hold = holds.get(session);
  if (!hold) holds.set(session, (hold = { open: 0, idleMs: 0 }));
  if (hold.open++ === 0) {
    // setTimeout() keeps its value in `timeout`; 0 stops the timer and keeps the server's listener
    hold.idleMs = (session as unknown as { timeout?: number }).timeout ?? 0;
    session.setTimeout(0);
  }
  let released = false;
  return () => {
    if (released) return;
    released = true;
    if (--hold.open === 0 && hold.idleMs > 0 && !session.destroyed) session.setTimeout(hold.idleMs);
  };
}

/** Copies bytes both ways until both sides have ended; see 4. at the top. */
function join(stream: http2.ServerHttp2Stream, socket: net.Socket, head: Buffer, graceMs: number): void {
  if (stream.session) stream.once('close', holdSession(stream.session));
  socket.setNoDelay(true);
  // an idle WebSocket is not a dead one: the h2 session's idle timeout bounds it, not the socket's
  socket.setTimeout(0);
  if (head.length > 0) stream.write(head);
  stream.pipe(socket);
  socket.pipe(stream);
  let grace: NodeJS.Timeout | undefined;
  const cut = () => {
    if (!stream.closed && !stream.destroyed) stream.close(NGHTTP2_CANCEL);
    socket.destroy();
  };
  const afterOneSide = () => {
    grace ??= setTimeout(cut, graceMs).unref();
  };
  // clean ends travel through pipe(): socket FIN → END_STREAM, END_STREAM → socket FIN
  socket.once('end', afterOneSide);
  stream.once('end', afterOneSide);
  socket.on('error', () => socket.destroy());
  stream.on('error', () => undefined);
  socket.once('close', () => {
    // closed without a FIN first (reset, error): the visitor's stream is reset too
    if (!socket.readableEnded) cut();
    else afterOneSide();
    if (stream.closed) clearTimeout(grace);
  });
  stream.once('close', () => {
    // the visitor reset the stream, or the connection went: nothing more can be delivered
    if (stream.rstCode !== http2.constants.NGHTTP2_NO_ERROR || !stream.readableEnded) socket.destroy();
    else afterOneSide();
    if (socket.destroyed) clearTimeout(grace);
  });
}
