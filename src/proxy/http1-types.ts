// The HTTP/1.1 client's contracts: what a caller hands it (ClientOptions, an Exchange and the Sink its
// answer goes to), and what the pool (http1-client.ts), a connection (http1-connection.ts) and its
// answer reader (http1-answer.ts) share (Origin, Attempt, PoolHooks).
import type { Readable } from 'node:stream';
import type { Connection } from './http1-connection.ts';
import type { HeaderList } from './http1-head.ts';
import type { UpstreamError } from './upstream-error.ts';

export type { HeaderList };

export interface ClientOptions {
  timeoutMs: number;
  connectTimeoutMs: number;
  /** connections per origin; more requests wait for one to come free */
  maxConnections: number;
  /** idle connections are closed after this, or earlier when the upstream's Keep-Alive says so */
  idleMs?: number;
}

export interface Exchange {
  /** `METHOD path HTTP/1.1\r\n` + header lines, without Host and without the closing empty line */
  head: string;
  method: string;
  /** streamed with chunked framing unless `bodyLength` is given; null: no body */
  body: Readable | null;
  bodyLength?: number;
  /**
   * called once with the answer's status, its header fields (the framing fields among them only as
   * the upstream sent them: never to be copied), the Connection header's tokens (lowercased,
   * comma-separated, '' when there is none) and the Content-Length to announce (-1: none; see
   * AnswerHead.length); may throw to refuse the answer (a 502, kind 'invalid_response'). Called just
   * before the first body byte is written, or at the end of the read that brought the head, so an
   * answer whose body breaks at once is refused before anything reaches the visitor.
   */
  onHead(status: number, headers: HeaderList, connection: string, length: number): Sink;
  /** the visitor left: abort() ends the exchange without an error (its promise resolves) */
  signal?: { aborted: boolean };
}

/** Where the answer goes: a ServerResponse or an Http2ServerResponse fits. */
export interface Sink {
  write(chunk: Buffer): boolean;
  end(chunk?: Buffer): unknown;
  once(event: 'drain', listener: () => void): unknown;
}

export interface Origin {
  key: string;
  host: string;
  port: number;
  secure: boolean;
  servername: string | undefined;
  hostHeader: string;
  idle: Connection[];
  count: number;
  waiting: Attempt[];
}

/** The request an exchange serves, as the connection sees it (the pool's Attempt). */
export interface Attempt {
  exchange: Exchange;
  answered: boolean;
  readonly settled: boolean;
  /** runs the exchange on `conn` (a connection that came free, or a new one) */
  start(conn: Connection): void;
  /** the connection failed before a byte of the answer: true when the request went again */
  retry(conn: Connection): boolean;
  finish(): void;
  fail(err: UpstreamError): void;
}

export interface PoolHooks {
  /** a finished exchange: the connection goes to the next waiting request, the idle list, or away */
  release(conn: Connection, reusable: boolean): void;
  /** the connection is gone: its slot comes free */
  forget(conn: Connection): void;
}
