// JSON logs (pino). Keys and Authorization headers never reach a log line: access lines are built
// from chosen fields only, and the redact list catches anything passed by mistake elsewhere.
import { pino, type Logger } from 'pino';
import { LogBuffer } from './log-buffer.ts';

export type { Logger };

const REDACT = ['key', '*.key', 'authorization', '*.authorization', 'headers.authorization', 'token', '*.token'];

export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  // stdout, buffered (src/log-buffer.ts): one write per ~16 KB instead of one per line (the access log
  // is the bulk of it), and at least every 250 ms so a quiet server's lines still show up at once;
  // flushed on exit, so only a crash can lose the last moment of lines
  let stream = destination;
  if (!stream) {
    const buffer = new LogBuffer(1);
    process.on('exit', () => buffer.flushSync());
    stream = buffer as unknown as NodeJS.WritableStream;
  }
  return pino({ level, base: { pid: process.pid }, redact: { paths: REDACT, censor: '[redacted]' } }, stream);
}

/** One access log line's fields; undefined ones are left out, as pino does. */
export interface AccessEntry {
  method: string | undefined;
  hostname: string;
  path: string;
  route: string;
  status: number;
  durationMs: number;
  clientIp: string;
  protocol: string;
  accountId: string | undefined;
  /** the answer was cut short after it started (upstream failure mid-body, or the visitor left) */
  aborted?: true;
}

/**
 * The access log: one pino-shaped JSON line per answer (`level`, `time`, `pid`, the fields, `msg`
 * "request"), written to the logger's own destination. It is assembled here rather than by pino: the
 * fields are named and typed (none holds a secret, so there is nothing to redact) and pino's generic
 * serialisation was a measurable share of a proxied request. Null when the level hides info lines.
 */
export function accessLogger(log: Logger): ((entry: AccessEntry) => void) | null {
  if (!log.isLevelEnabled('info')) return null;
  const stream = (log as unknown as Record<symbol, NodeJS.WritableStream>)[pino.symbols.streamSym];
  const prefix = `{"level":30,"time":`;
  const pid = `,"pid":${process.pid}`;
  return (e) => {
    stream.write(`${prefix}${Date.now()}${pid}${e.method === undefined ? '' : `,"method":${jsonString(e.method)}`},"hostname":${jsonString(e.hostname)},"path":${jsonString(e.path)},"route":"${e.route}","status":${e.status},"durationMs":${e.durationMs},"clientIp":${jsonString(e.clientIp)},"protocol":${jsonString(e.protocol)}${e.accountId === undefined ? '' : `,"accountId":${jsonString(e.accountId)}`}${e.aborted ? ',"aborted":true' : ''},"msg":"request"}\n`);
  };
}

/**
 * JSON.stringify(value) for a string, the same text: the fields of an access line (methods, hostnames,
 * paths, addresses, ids) are printable ASCII with no quote or backslash nearly always, and scanning
 * for that is cheaper than the builtin (~800 instructions a call, six calls a line). Anything else
 * goes to JSON.stringify, which escapes it.
 */
export function jsonString(value: string): string {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c || c > 0x7e) return JSON.stringify(value);
  }
  return `"${value}"`;
}
