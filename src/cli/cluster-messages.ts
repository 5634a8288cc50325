// What the workers of `portico serve --workers N` and their primary (serve-primary.ts) tell each other
// over node:cluster's channel, and the worker's side of two of those exchanges: a reload of every
// worker, and /metrics summed over all of them.
import type { Metrics } from '../metrics.ts';

export const METRICS_REQUEST = 'portico:metrics-request';
export const METRICS_RESPONSE = 'portico:metrics-response';
// a worker asks the primary to reload every worker; the primary tells each worker to reload, each
// answers with its problems (none: applied), and the primary answers the asking worker with them all
export const RELOAD_REQUEST = 'portico:reload-request';
export const RELOAD_RESPONSE = 'portico:reload-response';
export const RELOAD_ORDER = 'portico:reload';
export const RELOAD_RESULT = 'portico:reload-result';
// a worker tells the primary that it serves (every listener bound), or why it could not start: the
// primary says it once for all workers, which fail alike (the same ports, the same Redis)
export const STARTED = 'portico:started';
export const START_FAILED = 'portico:start-failed';
/** how long the primary waits for a worker's answer to a reload (one stuck worker must not hold the request forever) */
export const RELOAD_WAIT_MS = 15_000;

export interface ReloadMessage {
  type?: string;
  id?: number;
  /** RELOAD_RESULT, RELOAD_RESPONSE: null when applied */
  problems?: string[] | null;
}

export interface StartFailure {
  type?: string;
  /** the one line for stderr, without "portico: " */
  reason: string;
  /** the error as the log writes it (pino's serializer: message with its causes, stack) */
  err: object;
}

/**
 * POST /admin/reload in a worker: every worker reloads (through the primary), and this resolves once
 * all have applied the file; it rejects with the problems when any refused it.
 */
let nextReload = 0;
const reloadsWaiting = new Map<number, (problems: string[] | null) => void>();
export function reloadAllWorkers(): Promise<void> {
  if (reloadsWaiting.size === 0) process.on('message', onReloadResponse);
  const id = nextReload++;
  return new Promise<void>((resolve, reject) => {
    reloadsWaiting.set(id, (problems) => {
      reloadsWaiting.delete(id);
      if (reloadsWaiting.size === 0) process.off('message', onReloadResponse);
      if (problems === null) resolve();
      else reject(Object.assign(new Error(problems.join('; ')), { problems }));
    });
    process.send!({ type: RELOAD_REQUEST, id } satisfies ReloadMessage);
  });
}
function onReloadResponse(message: ReloadMessage): void {
  if (message.type === RELOAD_RESPONSE && message.id !== undefined) reloadsWaiting.get(message.id)?.(message.problems ?? null);
}

/** A worker answers /metrics with the sum over every worker, which only the primary can collect. */
export async function joinClusterMetrics(metrics: Metrics): Promise<void> {
  const { AggregatorRegistry } = await import('prom-client');
  // constructing one installs the listener that reports this worker's registry to the primary
  new AggregatorRegistry();
  AggregatorRegistry.setRegistries([metrics.registry]);
  let next = 0;
  const waiting = new Map<number, (text: string | null) => void>();
  process.on('message', (message: { type?: string; id?: number; text?: string | null }) => {
    if (message.type === METRICS_RESPONSE && message.id !== undefined) waiting.get(message.id)?.(message.text ?? null);
  });
  metrics.collectWith(() =>
    new Promise<string | null>((resolve) => {
      const id = next++;
      const timer = setTimeout(() => finish(null), 6_000);
      const finish = (text: string | null) => {
        clearTimeout(timer);
        waiting.delete(id);
        resolve(text);
      };
      waiting.set(id, finish);
      process.send!({ type: METRICS_REQUEST, id });
    }),
  );
}
