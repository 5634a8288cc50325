// How a request to an upstream failed: the forwarder counts each kind and answers 502 or 504 by it.
// 'closed': the client was closed (shutdown) before the request got a connection; it never went up.
export type UpstreamErrorKind = 'connect' | 'timeout' | 'reset' | 'closed' | 'other';

export class UpstreamError extends Error {
  readonly kind: UpstreamErrorKind;
  constructor(kind: UpstreamErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.kind = kind;
  }
}

/** Where the answer goes: a ServerResponse or an Http2ServerResponse fits. */
