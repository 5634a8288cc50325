// What one HTTP/2 connection may make Portico do. Each abuse ends with the connection closed (GOAWAY,
// then the socket) or its streams reset, within a bounded time, so other connections keep their
// share of the CPU and of the upstream pools:
// 1. rapid reset (CVE-2023-44487, streams opened and cancelled in a loop): nghttp2's RST_STREAM
//    rate limit, a token bucket of `streamResetBurst` refilled at `streamResetRate` a second. Until it
//    trips, each stream would still reach the upstream (a connection opened, then dropped with the
//    request), so a connection whose client has cancelled streams before their answer has its next
//    streams dispatched one turn later (setImmediate, h2-stream.ts), after the rest of what it sent
//    is read: a RST_STREAM right behind the HEADERS then closes the stream before any work is done.
//    Extended CONNECT streams (WebSockets) count and wait the same way: each would open an upstream
//    connection;
// 2. CONTINUATION floods (CVE-2024-28182 in nghttp2, CVE-2024-27983 in Node): nghttp2 refuses more
//    than a few CONTINUATION frames per header block, and SETTINGS_MAX_HEADER_LIST_SIZE and
//    maxHeaderListPairs bound the block;
// 3. frames that break the protocol: maxSessionInvalidFrames; streams past SETTINGS_MAX_CONCURRENT_
//    STREAMS, refused with REFUSED_STREAM: maxSessionRejectedStreams; memory: maxSessionMemory;
// 4. PING and SETTINGS floods (CVE-2019-9512, -9515): nghttp2 stops a peer that does not read its
//    ACKs; one that does is counted here, PING and SETTINGS frames together in a token bucket;
// 5. streams that stop moving (a body never sent, a zero window held forever, a slow reader): a
//    request stream with no frame either way for `streamIdleMs` is reset (CANCEL); a connection
//    whose streams keep stalling is closed, since nothing it sends is a request any more.
import http2 from 'node:http2';

const { NGHTTP2_CANCEL, NGHTTP2_ENHANCE_YOUR_CALM } = http2.constants;

/** Options of http2.createSecureServer (Node's defaults in parentheses). */
export const H2_LIMITS = {
  maxSessionInvalidFrames: 100, // (1000)
  maxSessionRejectedStreams: 100, // (100)
  maxOutstandingPings: 10, // (10) our own PINGs awaiting an ACK
  maxSettings: 32, // (32) entries in one SETTINGS frame
  maxHeaderListPairs: 128, // (128)
  maxSessionMemory: 10, // (10) MiB per connection
  // nghttp2's defaults are 1000 and 33: a browser cancels tens of streams when it leaves a page, so
  // 200 at once and 50 a second leave it room while an attacker is stopped after ~200 streams
  streamResetBurst: 200,
  streamResetRate: 50,
} as const;

/** SETTINGS advertised to clients (RFC 9113 §6.5.2; RFC 8441 §3). */
export const H2_SETTINGS = {
  maxConcurrentStreams: 128,
  // the same order as HTTP/1.1's header limits (nginx's large_client_header_buffers 4 × 8k): 64 KiB
  maxHeaderListSize: 64 * 1024,
  // SETTINGS_ENABLE_CONNECT_PROTOCOL: browsers open WebSockets on the h2 connection they hold
  enableConnectProtocol: true,
} as const;

/** PING + SETTINGS frames a connection may send at once, and a second after that (4.). */
export const CONTROL_FRAME_BURST = 100;
export const CONTROL_FRAMES_PER_SECOND = 20;
/** Stalled streams (5.) after which a connection is closed. */
export const STALLED_STREAMS_PER_SESSION = 8;
/** Streams cancelled by the client before their answer, after which its requests start a turn later (1.). */
export const CANCELS_BEFORE_DEFERRING = 2;

/** per connection: what 1. and 5. count */
interface SessionState {
  /** streams its client cancelled before they were answered */
  cancels: number;
  /** streams reset for standing still */
  stalled: number;
  close(reason: 'control-frame-flood' | 'stalled-streams'): void;
}
const states = new WeakMap<http2.Http2Session, SessionState>();

/** true when requests of this connection should start a turn later (see 1.) */
export function startLater(session: http2.ServerHttp2Session | undefined): boolean {
  return session !== undefined && (states.get(session)?.cancels ?? 0) >= CANCELS_BEFORE_DEFERRING;
}

// one listener function for every stream (no closure per request): `this` is the stream
function onStreamAborted(this: http2.ServerHttp2Stream): void {
  const state = this.session && states.get(this.session);
  if (state) state.cancels++;
}

// an extended CONNECT (a WebSocket, RFC 8441) counts only until it is answered: a WebSocket the
// client resets once open is an ordinary way to close it
function onTunnelAborted(this: http2.ServerHttp2Stream): void {
  if (!this.headersSent) onStreamAborted.call(this);
}

function onStreamIdle(this: http2.ServerHttp2Stream): void {
  if (this.closed) return;
  const state = this.session && states.get(this.session);
  this.close(NGHTTP2_CANCEL);
  if (state && ++state.stalled >= STALLED_STREAMS_PER_SESSION) state.close('stalled-streams');
}

export interface SessionLimits {
  /** how long a request stream may see no frame either way; read at each stream */
  streamIdleMs(): number;
  /** one call per connection closed for abuse, with the reason */
  onAbuse(reason: 'control-frame-flood' | 'stalled-streams'): void;
}

/** Installs 4. and 5. on a new server session. */
export function limitSession(session: http2.ServerHttp2Session, limits: SessionLimits): void {
  let tokens = CONTROL_FRAME_BURST;
  let last = performance.now();
  let closing = false;
  const state: SessionState = {
    cancels: 0,
    stalled: 0,
    close(reason) {
      if (closing || session.destroyed) return;
      closing = true;
      limits.onAbuse(reason);
      // GOAWAY(ENHANCE_YOUR_CALM) first, then the socket: destroy() alone may cut the socket while frames
      // queued before it (the GOAWAY among them) are still unwritten
      session.goaway(NGHTTP2_ENHANCE_YOUR_CALM);
      setImmediate(() => session.destroy(new Error(`HTTP/2 connection closed: ${reason}`), NGHTTP2_ENHANCE_YOUR_CALM));
    },
  };
  states.set(session, state);
  const controlFrame = () => {
    const now = performance.now();
    tokens = Math.min(CONTROL_FRAME_BURST, tokens + ((now - last) * CONTROL_FRAMES_PER_SECOND) / 1000);
    last = now;
    if (--tokens < 0) state.close('control-frame-flood');
  };
  session.on('ping', controlFrame);
  session.on('remoteSettings', controlFrame);
  session.on('stream', (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => {
    // RST_STREAM from the client while the answer was not finished
    if (headers[':method'] === 'CONNECT') {
      stream.on('aborted', onTunnelAborted);
      // no streamIdleMs: a WebSocket may be quiet for long (the connection's idle timeout bounds it,
      // websocket-h2.ts), and until it opens the bridge's upstream timeout bounds the wait
      return;
    }
    stream.on('aborted', onStreamAborted);
    stream.setTimeout(limits.streamIdleMs());
    stream.on('timeout', onStreamIdle);
  });
}
