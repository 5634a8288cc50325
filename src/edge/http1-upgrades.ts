// HTTP/1.1 requests after which Node hands the HTTPS listener the connection itself: Upgrade
// (WebSocket) and CONNECT. Each waits its turn behind pipelined requests, then is refused here (and
// recorded as a refusal before routing) or, an Upgrade, routed. The 'connect' event also carries
// HTTP/2 CONNECT streams, which go to extended-connect.ts.
import type http from 'node:http';
import http2 from 'node:http2';
import type { Duplex } from 'node:stream';
import { sendError } from '../errors.ts';
import { afterEarlierAnswers, answerOn } from '../proxy/websocket-h1.ts';
import { hostnameFromHost } from '../routing/hostname.ts';
import type { refusalRecorder } from './before-routing.ts';
import type { ListenerHandlers } from './listeners.ts';
import { checkTarget } from './request-target.ts';
import type { TrackedConnections } from './tls-connections.ts';

export function serveUpgrades(
  https: http2.Http2SecureServer,
  handlers: ListenerHandlers,
  tracked: TrackedConnections,
  beforeRouting: ReturnType<typeof refusalRecorder>,
): void {
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
      // the same answer as a request refused at the listener ('request', listeners.ts), then the
      // connection closes
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
}
