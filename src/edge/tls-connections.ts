// What the HTTPS listener knows of its connections (TLS sockets, HTTP/2 sessions, HTTP/1.1 requests in
// flight): its only per-connection state, kept for a stop (listeners.ts close) and the headers deadline.
import type http2 from 'node:http2';
import type { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import { cutByStop } from './exchanges.ts';

export type TrackedConnections = ReturnType<typeof trackConnections>;

/**
 * Follows TLS connections of the HTTPS listener so a shutdown can close them gently, then firmly.
 * Also gives HTTP/1.1 connections a deadline for their request headers: behind allowHTTP1, Node does
 * not enforce headersTimeout, so a client trickling header bytes (slowloris) would keep its socket.
 */
export function trackConnections(server: http2.Http2SecureServer, headersMs: () => number) {
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
