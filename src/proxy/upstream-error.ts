// How a request to an upstream failed: the forwarder counts each kind and answers 502 or 504 by it.
// 'closed': the client was closed (shutdown) before the request got a connection; it never went up.
// 'invalid_response': the answer broke HTTP/1.1's grammar or framing (http1-head.ts, http1-body.ts).
export type UpstreamErrorKind = 'connect' | 'timeout' | 'reset' | 'closed' | 'invalid_response' | 'other';

export class UpstreamError extends Error {
  readonly kind: UpstreamErrorKind;
  constructor(kind: UpstreamErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.kind = kind;
  }
}

/** A connection's socket error (undefined: it closed) as a kind; `connected`: it got as far as connecting. */
export function classify(err: NodeJS.ErrnoException | undefined, connected: boolean): UpstreamError {
  const code = err?.code ?? '';
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EHOSTUNREACH' || code === 'EAI_AGAIN' || code === 'ENETUNREACH') {
    return new UpstreamError('connect', `the upstream could not be reached (${code})`, { cause: err });
  }
  if (!connected && err && !code.startsWith('ECONN')) return new UpstreamError('connect', `connecting to the upstream failed: ${err.message}`, { cause: err });
  if (code === 'ECONNRESET' || code === 'EPIPE' || err === undefined) return new UpstreamError('reset', 'the upstream closed the connection before the answer was complete', { cause: err });
  return new UpstreamError('other', err.message, { cause: err });
}
