// A request's head as it goes up (RFC 9112 §3): the exchange's head, Host, and the framing fields
// Portico chooses for the body, as one string for one write. Apart from the connection
// (http1-connection.ts) because what goes up for which body is a rule of its own (http1-client.ts).
import type { Exchange } from './http1-types.ts';

// methods whose request means to carry content: sent without a body, they say so with
// `content-length: 0` (RFC 9110 §8.6; an upstream may answer 411 otherwise). Go's Transport picks the
// same three; GET, HEAD and the rest go without framing fields
const BODY_METHODS: ReadonlySet<string> = new Set(['POST', 'PUT', 'PATCH']);

export function requestHead(exchange: Exchange, hostHeader: string): string {
  const framing = exchange.body === null
    ? (BODY_METHODS.has(exchange.method) ? 'content-length: 0\r\n' : '')
    : exchange.bodyLength === undefined ? 'transfer-encoding: chunked\r\n' : `content-length: ${exchange.bodyLength}\r\n`;
  return `${exchange.head}host: ${hostHeader}\r\n${framing}\r\n`;
}
