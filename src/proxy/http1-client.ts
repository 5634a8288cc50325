// The upstream side of the forwarder: a lean HTTP/1.1 client (RFC 9112). This file is the pool: per
// upstream origin a keep-alive set of TCP (or TLS) connections, one exchange at a time on each, and
// the requests waiting for one. A connection (http1-connection.ts) writes the request head as one
// string (http1-request-head.ts); its answer reader (http1-answer.ts) parses the answer head
// (http1-head.ts) and streams its body (http1-body.ts: Content-Length, chunked, or up to the close)
// into the caller's sink with back-pressure. It exists because a general
// client (undici) spent most of a proxied request's CPU on work a proxy does not need.
//
// Rules it keeps:
// - a connection is reused only after a complete exchange, with the request body fully sent, no bytes
//   beyond the response (in its read, in a later read of the same turn, or held in the socket: a
//   waiting request never has its request written before them), and no `Connection: close` (HTTP/1.0
//   needs `keep-alive`); anything else closes it;
// - an idle connection is not reused past the upstream's `Keep-Alive: timeout` hint minus a second
//   (default 4 s; one never taken again closes after timeoutMs), so a request rarely meets a connection
//   the upstream is closing; when it does (a reused connection closes before one byte of the answer)
//   an idempotent request without a body is retried once on a new connection. Any other request may
//   have been read and acted on before the close: it fails as it would unretried (RFC 9110 §9.2.2,
//   RFC 9112 §9.3.1: a proxy MUST NOT retry a non-idempotent request automatically);
// - a request without a body whose method means to carry one (POST, PUT, PATCH) goes up with
//   `content-length: 0` (RFC 9110 §8.6), as Go's Transport and Node's client send it;
// - obs-fold, a malformed status line or header, conflicting Content-Length: the answer is refused ('other');
// - 1xx answers other than 101 are skipped, at most 32 of them (more: refused); 101 outside an upgrade is refused;
// - timeouts: connecting (connectTimeoutMs); the final answer head complete within timeoutMs of the
//   request going up (or of the answer's first byte, if sooner): a deadline, however the head's bytes
//   trickle in; and no byte from the upstream for timeoutMs while an exchange is open (every gap in
//   the body; not while a full sink holds the connection paused: then the wait is the visitor's).
//   A timeout is never retried;
// - close(): idle connections close; requests waiting for a connection, and any made later, fail
//   ('closed'); exchanges under way finish, then their connections close. No connection is opened
//   after close(), not even for a retry.
import net from 'node:net';
import tls from 'node:tls';
import { Connection, type Attempt, type ClientOptions, type Exchange, type Origin } from './http1-connection.ts';
import { UpstreamError } from './upstream-error.ts';

export { UpstreamError, type UpstreamErrorKind } from './upstream-error.ts';
export type { ClientOptions, Exchange, HeaderList, Sink } from './http1-connection.ts';

export interface Http1Client {
  /** resolves when the answer was written to the sink in full (or the exchange was aborted) */
  request(origin: string, exchange: Exchange): Call;
  /** exchanges under way finish; waiting and later requests fail with kind 'closed' */
  close(): void;
}

export interface Call {
  done: Promise<void>;
  /** the visitor left: the connection is closed (it cannot be reused mid-answer) */
  abort(): void;
  /** true once onHead was called */
  readonly answered: boolean;
}

const DEFAULT_IDLE_MS = 4_000;
// RFC 9110 §9.2.2: the methods whose request, sent twice, has the effect of sending it once
const IDEMPOTENT: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']);

export function createHttp1Client(options: ClientOptions): Http1Client {
  const origins = new Map<string, Origin>();
  const idleMs = options.idleMs ?? DEFAULT_IDLE_MS;
  let closed = false;

  const originOf = (key: string): Origin => {
    let origin = origins.get(key);
    if (origin === undefined) {
      const url = new URL(key);
      const secure = url.protocol === 'https:';
      const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
      origin = {
        key,
        host,
        port: Number(url.port || (secure ? 443 : 80)),
        secure,
        servername: secure && net.isIP(host) === 0 ? host : undefined,
        hostHeader: url.host,
        idle: [],
        count: 0,
        waiting: [],
      };
      origins.set(key, origin);
    }
    return origin;
  };

  const connect = (origin: Origin): Connection => {
    origin.count += 1;
    const socket = origin.secure
      ? tls.connect({ host: origin.host, port: origin.port, servername: origin.servername, ALPNProtocols: ['http/1.1'] })
      : net.connect({ host: origin.host, port: origin.port });
    socket.setNoDelay(true);
    return new Connection(socket, origin, options, idleMs, { release, forget });
  };

  // a finished exchange hands its connection to the next waiting request, or to the idle list
  const release = (conn: Connection, reusable: boolean): void => {
    const origin = conn.origin;
    if (!reusable || closed) {
      conn.destroy();
    } else {
      const next = origin.waiting.shift();
      if (next) {
        next.start(conn);
        return;
      }
      conn.park();
      origin.idle.push(conn);
    }
  };

  const forget = (conn: Connection): void => {
    const origin = conn.origin;
    origin.count -= 1;
    const at = origin.idle.indexOf(conn);
    if (at !== -1) origin.idle.splice(at, 1);
    // a slot came free: a waiting request gets a new connection (unless a retry took the slot)
    if (closed || origin.count >= options.maxConnections) return;
    const next = origin.waiting.shift();
    if (next) next.start(connect(origin));
  };

  const refused = (): UpstreamError => new UpstreamError('closed', 'the upstream client is closed');

  return {
    request(originKey, exchange) {
      if (closed) {
        const pending = new Pending(exchange, () => undefined);
        pending.fail(refused());
        return pending;
      }
      const origin = originOf(originKey);
      // a retry after close() opens no connection: the request fails as its connection did
      const pending = new Pending(exchange, () => (closed ? undefined : connect(origin)));
      const idle = takeIdle(origin);
      if (idle) pending.start(idle);
      else if (origin.count < options.maxConnections) pending.start(connect(origin));
      else {
        origin.waiting.push(pending);
        pending.onAbort = () => {
          const at = origin.waiting.indexOf(pending);
          if (at !== -1) origin.waiting.splice(at, 1);
        };
      }
      return pending;
    },
    close() {
      closed = true;
      for (const origin of origins.values()) {
        for (const conn of origin.idle.splice(0)) conn.destroy();
        for (const waiting of origin.waiting.splice(0)) waiting.fail(refused());
      }
    },
  };
}

function takeIdle(origin: Origin): Connection | undefined {
  // newest first: the connection least likely to have been closed by the upstream meanwhile
  while (origin.idle.length > 0) {
    const conn = origin.idle.pop()!;
    if (conn.usable()) return conn;
    conn.destroy();
  }
  return undefined;
}

/** One request: waits for a connection, may be retried once on a new one, settles `done`. */
class Pending implements Call, Attempt {
  done: Promise<void>;
  answered = false;
  onAbort: (() => void) | undefined;
  exchange: Exchange;
  #resolve!: () => void;
  #reject!: (err: unknown) => void;
  #conn: Connection | undefined;
  /** a new connection for the retry; undefined once the client is closed */
  #fresh: () => Connection | undefined;
  #retried = false;
  #settled = false;

  constructor(exchange: Exchange, fresh: () => Connection | undefined) {
    this.exchange = exchange;
    this.#fresh = fresh;
    this.done = new Promise<void>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
  }

  start(conn: Connection): void {
    if (this.#settled) {
      conn.release(true);
      return;
    }
    this.#conn = conn;
    conn.begin(this);
  }

  abort(): void {
    if (this.#settled) return;
    this.#settled = true;
    this.onAbort?.();
    this.#conn?.destroy();
    this.#resolve();
  }

  /** the connection failed before a byte of the answer: true when the request went again */
  retry(conn: Connection): boolean {
    if (this.#retried || this.#settled || !conn.reused || this.exchange.body !== null || !IDEMPOTENT.has(this.exchange.method)) return false;
    const fresh = this.#fresh();
    if (fresh === undefined) return false;
    this.#retried = true;
    this.start(fresh);
    return true;
  }

  finish(): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#resolve();
  }

  fail(err: UpstreamError): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#reject(err);
  }

  get settled(): boolean {
    return this.#settled;
  }
}

