// JSON logs (pino). Keys and Authorization headers never reach a log line: access lines are built
// from chosen fields only, and the redact list catches anything passed by mistake elsewhere.
import { pino, type Logger } from 'pino';

export type { Logger };

const REDACT = ['key', '*.key', 'authorization', '*.authorization', 'headers.authorization', 'token', '*.token'];

export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  // buffered: one write per 4 KiB instead of one per line (the access log is the bulk of it), and
  // at least every 250 ms so a quiet server's lines still show up at once; flushed on shutdown, so
  // only a crash can lose the last moment of lines
  let stream = destination;
  if (!stream) {
    const buffered = pino.destination({ sync: false, minLength: 4096 });
    setInterval(() => {
      try {
        buffered.flush();
      } catch {
        // not ready yet (still opening): the next tick flushes
      }
    }, 250).unref();
    stream = buffered as unknown as NodeJS.WritableStream;
  }
  return pino({ level, base: { pid: process.pid }, redact: { paths: REDACT, censor: '[redacted]' } }, stream);
}

/**
 * The access log: same destination and level, no redaction pass — its lines are assembled from
 * named fields (method, hostname, route, status …) that never hold a secret, and redaction was a
 * measurable share of the cost of a request.
 */
export function accessLogger(log: Logger): Logger {
  const stream = (log as unknown as Record<symbol, NodeJS.WritableStream>)[pino.symbols.streamSym];
  return pino({ level: log.level, base: { pid: process.pid } }, stream);
}
