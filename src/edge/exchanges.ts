// Writing down an exchange once it is over: its count and duration in the metrics and its access
// line, for the request pipeline (pipeline.ts) and the exchanges answered outside it (WebSockets).
import { accessLogger, type AccessEntry, type Logger } from '../log.ts';
import { METHOD_LABELS, ROUTE_LABELS, type Metrics, type RouteLabel } from '../metrics.ts';
import type { Series, Tally } from '../metrics-tally.ts';

/** the status of an exchange over before anything was answered: nginx's and Traefik's "client closed request" */
export const CLIENT_CLOSED = 499;

/**
 * TLS connections and HTTP/2 sessions a stop cut when its shutdown time ran out (listeners.ts close, tls-connections.ts). An
 * exchange on one of them still without an answer did not lose its visitor: Portico closed it, and its
 * line and count say 503 with `aborted`, as a refusal cut short says the status it would have had.
 */
export const cutByStop = new WeakSet<object>();
export const STOPPED = 503;

/**
 * Counts an answer and observes its duration through cells fetched once per label set (route ×
 * method × status stays small: a few routes, nine method labels, the statuses in use), found by a
 * number rather than a string built per request (metrics-tally.ts).
 */
export function answerMetrics(metrics: Metrics): (route: RouteLabel, method: string | undefined, status: number, seconds: number) => void {
  const counts = new Map<number, Tally>();
  const durations = new Map<RouteLabel, Series>();
  return (route, method, status, seconds) => {
    const methodIndex = method === undefined ? -1 : METHOD_LABELS.indexOf(method);
    // statuses are three digits (Node refuses others); the route's index is its position in ROUTE_LABELS
    const key = (ROUTE_LABELS.indexOf(route) * 16 + methodIndex + 1) * 1000 + status;
    let count = counts.get(key);
    if (count === undefined) counts.set(key, (count = metrics.answers.cell({ route, method: methodIndex === -1 ? 'OTHER' : method!, status: String(status) })));
    count.n++;
    let duration = durations.get(route);
    if (duration === undefined) durations.set(route, (duration = metrics.httpDuration.series({ route })));
    metrics.httpDuration.observe(duration, seconds);
  };
}

/**
 * The metrics and access line of an exchange answered outside the request pipeline (a WebSocket over
 * HTTP/2, extended CONNECT, or over HTTP/1.1 to a project): the same counters and writer, one call
 * when the exchange is over.
 * `durationMs` unrounded.
 */
export function exchangeRecorder(metrics: Metrics, log: Logger): (entry: AccessEntry & { route: RouteLabel }) => void {
  const access = accessLogger(log);
  const recordAnswer = answerMetrics(metrics);
  return (entry) => {
    recordAnswer(entry.route, entry.method, entry.status, entry.durationMs / 1000);
    access?.({ ...entry, durationMs: Math.round(entry.durationMs * 10) / 10 });
  };
}
