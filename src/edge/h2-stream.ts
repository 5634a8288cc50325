// HTTP/2 streams of the HTTPS listener, first offered to Portico's own handler on Node's core stream
// API, then (when it declines) to Node's compatibility layer, which turns them into the
// request/response pair every other route is written for. One listener still serves HTTP/1.1 and
// HTTP/2 (DESIGN §3): only the hand-over of an HTTP/2 stream changes.
//
// Node installs the compatibility layer as a 'stream' listener of the server when its first
// 'request' listener is added (and never again). It is taken off here and called for the streams
// the handler declines, with the arguments Node gave, so those see exactly what they saw before:
// 'request', 'connect' (extended CONNECT, RFC 8441), 'checkContinue'.
import type { IncomingHttpHeaders, Http2SecureServer, ServerHttp2Session, ServerHttp2Stream } from 'node:http2';
import { startLater } from './h2-limits.ts';

/**
 * true: the stream is served; false: nothing was done with it, and the compatibility layer takes it.
 * `rawHeaders`: the request's fields as received, [name, value, …] (cookie crumbs apart, RFC 9113 §8.2.3).
 */
export type StreamHandler = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, rawHeaders: string[]) => boolean;

type StreamListener = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, rawHeaders: string[]) => void;

/** `handler()` is read per stream, so a reload's new handler takes the next one. Call after the server's 'request' listeners are on. */
export function serveStreams(server: Http2SecureServer, handler: () => StreamHandler | undefined): void {
  const listeners = server.listeners('stream') as StreamListener[];
  // no compatibility layer (no 'request' listener yet), or someone else's listener: leave it all to Node
  if (listeners.length !== 1) return;
  const compat = listeners[0];
  server.removeListener('stream', compat);
  const dispatch = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, rawHeaders: string[]) => {
    const serve = handler();
    if (serve === undefined || !serve(stream, headers, flags, rawHeaders)) compat(stream, headers, flags, rawHeaders);
  };
  server.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, rawHeaders: string[]) => {
    // a client that cancels streams before their answer (rapid reset) has the rest of what it sent
    // read first: a RST_STREAM right behind the HEADERS then closes the stream before any work (h2-limits.ts)
    if (startLater(stream.session as ServerHttp2Session | undefined)) setImmediate(() => !stream.destroyed && dispatch(stream, headers, flags, rawHeaders));
    else dispatch(stream, headers, flags, rawHeaders);
  });
}
