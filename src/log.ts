// JSON logs (pino). Keys and Authorization headers never reach a log line: access lines are built
// from chosen fields only, and the redact list catches anything passed by mistake.
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid },
      redact: { paths: ['key', '*.key', 'authorization', '*.authorization', 'headers.authorization', 'token', '*.token'], censor: '[redacted]' },
    },
    destination ?? pino.destination({ sync: false }),
  );
}
