// The lines and counts of what the HTTPS listener answers itself, before routing (listeners.ts, http1-upgrades.ts): a
// refusal there, or an upgrade whose visitor left while it waited its turn.
import type http from 'node:http';
import type http2 from 'node:http2';
import type { Metrics } from '../metrics.ts';
import { accessLogger, type Logger } from '../log.ts';
import { hostnameFromHost } from '../routing/hostname.ts';
import { clientIp, type Trust } from './client-ip.ts';
import { proxiedAddress } from './proxy-protocol.ts';
import { CLIENT_CLOSED } from './exchanges.ts';

/**
 * For an exchange that never reaches routing: counted and logged as the pipeline does the others,
 * route `unknown`, by the function returned, once the exchange is over (`res` undefined: never
 * answered). Hostname and path as the pipeline takes them, unless given (a CONNECT's come from its
 * target).
 */
export function refusalRecorder(metrics: Metrics, log: Logger, trust: Trust) {
  return (req: http.IncomingMessage | http2.Http2ServerRequest, target?: { hostname: string; path: string }) => {
    const started = performance.now();
    // now: once the connection has closed, its address is gone
    const ip = clientIp(proxiedAddress(req.socket)?.address ?? req.socket.remoteAddress ?? '', req.headers['x-forwarded-for'], trust);
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const { hostname, path } = target ?? { hostname: hostnameFromHost(req.headers.host ?? (req.headers[':authority'] as string | undefined)), path: q === -1 ? url : url.slice(0, q) };
    return (res: http.ServerResponse | http2.Http2ServerResponse | undefined) => {
      const ms = performance.now() - started;
      const status = res?.headersSent ? res.statusCode : CLIENT_CLOSED;
      const reset = (res as http2.Http2ServerResponse | undefined)?.stream?.rstCode;
      metrics.answered('unknown', req.method, status, ms / 1000);
      // the logger is asked at each line, so a reload's log level holds here too
      accessLogger(log)?.({
        method: req.method,
        hostname,
        path,
        route: 'unknown',
        status,
        durationMs: Math.round(ms * 10) / 10,
        clientIp: ip,
        protocol: req.httpVersion,
        accountId: undefined,
        aborted: res?.headersSent && res.writableFinished && !reset ? undefined : true,
      });
    };
  };
}
