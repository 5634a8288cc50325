// `portico serve [--workers N]`: one process, or a primary that runs N workers on the same ports
// (node:cluster), replaces a worker that dies, forwards SIGHUP/SIGTERM, and answers the workers'
// requests for metrics summed over all of them, for a reload of every worker (POST /admin/reload
// taken by one of them) and, while Redis is unreachable, for rate-limit decisions from the
// instance's one limiter (ratelimit/instance-limiter.ts).
import cluster, { type Worker } from 'node:cluster';
import { availableParallelism } from 'node:os';
import { ConfigError, loadConfig, type Config } from '../config.ts';
import { pino } from 'pino';
import { createLogger, type Logger } from '../log.ts';
import { loadOrCreateToken } from '../admin/token.ts';
import { ensureFallbackCertificate } from '../certs/fallback.ts';
import { persistCompileCache } from './compile-cache.ts';
import type { LimiterRequest } from '../ratelimit/instance-limiter.ts';

const METRICS_REQUEST = 'portico:metrics-request';
const METRICS_RESPONSE = 'portico:metrics-response';
// a worker asks the primary to reload every worker; the primary tells each worker to reload, each
// answers with its problems (none: applied), and the primary answers the asking worker with them all
const RELOAD_REQUEST = 'portico:reload-request';
const RELOAD_RESPONSE = 'portico:reload-response';
const RELOAD_ORDER = 'portico:reload';
const RELOAD_RESULT = 'portico:reload-result';
// a worker tells the primary that it serves (every listener bound), or why it could not start: the
// primary says it once for all workers, which fail alike (the same ports, the same Redis)
const STARTED = 'portico:started';
const START_FAILED = 'portico:start-failed';
/** how long the primary waits for a worker's answer to a reload (one stuck worker must not hold the request forever) */
const RELOAD_WAIT_MS = 15_000;

interface ReloadMessage {
  type?: string;
  id?: number;
  /** RELOAD_RESULT, RELOAD_RESPONSE: null when applied */
  problems?: string[] | null;
}

interface StartFailure {
  type?: string;
  /** the one line for stderr, without "portico: " */
  reason: string;
  /** the error as the log writes it (pino's serializer: message with its causes, stack) */
  err: object;
}

export async function runServer(requestedWorkers: number | undefined): Promise<void> {
  let config: Config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
  const log = createLogger(config.log.level);
  // embedded state has one owner; with Redis every core can serve
  const workers = config.redis.url ? (requestedWorkers ?? availableParallelism()) : 1;
  if (!config.redis.url && requestedWorkers !== undefined && requestedWorkers > 1) {
    log.warn({ requested: requestedWorkers }, 'embedded state is owned by one process: running 1 worker (set PORTICO_REDIS_URL for more)');
  }
  if (cluster.isPrimary && workers > 1) {
    // first-start files are made once, here, not raced by the workers
    if (!config.admin.token) loadOrCreateToken(config.dataDir, log);
    await ensureFallbackCertificate(config.certsDir, [...config.api.hosts, ...config.api.stagingHosts]);
    return runPrimary(workers, log);
  }
  return runWorker(config, log);
}

async function runWorker(config: Config, log: Logger): Promise<void> {
  // loaded here so admin commands start without the server's dependencies
  const { serve } = await import('../main.ts');
  let running: Awaited<ReturnType<typeof serve>>;
  try {
    running = await serve(config, log, process.env, cluster.isWorker ? { reloadEverywhere: reloadAllWorkers } : {});
  } catch (err) {
    const cause = (err as Error & { cause?: Error }).cause;
    const reason = `${(err as Error).message}${cause?.message ? `: ${cause.message}` : ''}`;
    if (cluster.isWorker) {
      // told by the primary, once for every worker; exit once it has the message (or cannot get it)
      process.send!({ type: START_FAILED, reason, err: pino.stdSerializers.err(err as Error) } satisfies StartFailure, () => process.exit(1));
      return;
    }
    log.fatal({ err }, 'Portico could not start');
    log.flush?.();
    console.error(`portico: ${reason}`);
    process.exit(1);
  }
  if (cluster.isWorker) process.send!({ type: STARTED });
  // everything a start needs is compiled by now: written a moment later (after the first
  // handshakes, which a cold write would delay), so the next start finds it even if this one is killed
  setTimeout(persistCompileCache, 1_000).unref();
  if (cluster.isWorker) {
    await joinClusterMetrics(running.metrics);
    const reloading = running;
    process.on('message', (message: ReloadMessage) => {
      if (message.type !== RELOAD_ORDER) return;
      reloading.reload().then(
        () => null,
        (err) => {
          const problems = (err as { problems?: string[] }).problems ?? [(err as Error).message];
          log.error({ problems }, 'reload refused; the previous configuration stays in force');
          return problems;
        },
      ).then((problems) => process.send!({ type: RELOAD_RESULT, id: message.id, problems } satisfies ReloadMessage));
    });
  }
  // One stop, however many signals ask for it: under systemd (KillMode=control-group) or on a
  // terminal's Ctrl-C every process gets the signal and the primary forwards its own, so a worker
  // gets two, and Node's default action for the second would cut the requests in flight.
  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.info({ signal }, 'already stopping');
      return;
    }
    stopping = true;
    log.info({ signal }, 'stopping: no new connections, finishing requests in flight');
    running.stop().then(
      () => {
        log.info('stopped');
        log.flush?.();
        process.exit(0);
      },
      (err) => {
        log.error({ err }, 'stop failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGHUP', () => {
    running.reload().then(
      () => undefined,
      (err) => log.error({ problems: (err as { problems?: string[] }).problems ?? [(err as Error).message] }, 'reload refused; the previous configuration stays in force'),
    );
  });
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

/**
 * POST /admin/reload in a worker: every worker reloads (through the primary), and this resolves once
 * all have applied the file; it rejects with the problems when any refused it.
 */
let nextReload = 0;
const reloadsWaiting = new Map<number, (problems: string[] | null) => void>();
function reloadAllWorkers(): Promise<void> {
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
async function joinClusterMetrics(metrics: import('../metrics.ts').Metrics): Promise<void> {
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

async function runPrimary(count: number, log: Logger): Promise<void> {
  const [{ AggregatorRegistry }, { MemoryLimiter }, { answerLimiterRequest, LIMITER_REQUEST }] = await Promise.all([
    import('prom-client'),
    import('../ratelimit/memory-limiter.ts'),
    import('../ratelimit/instance-limiter.ts'),
  ]);
  const aggregator = new AggregatorRegistry();
  // the workers' fallback while Redis is unreachable: one for the instance, as DESIGN §4 says, and
  // held here so a replaced worker finds the counts and bans of the one it replaces
  const limiter = new MemoryLimiter();
  let stopping = false;
  let exitCode = 0;
  // reloads asked for by a worker, waiting for every worker's result: id → one per worker
  let nextOrder = 0;
  const orders = new Map<number, (worker: Worker, problems: string[] | null) => void>();
  const reloadEveryWorker = (asking: Worker, askedId: number | undefined) => {
    const id = nextOrder++;
    const targets = all();
    const results = new Map<Worker, string[] | null>();
    const finish = () => {
      clearTimeout(timer);
      orders.delete(id);
      const refused = [...results.values()].filter((p): p is string[] => p !== null);
      const applied = targets.length - refused.length - targets.filter((w) => !results.has(w)).length;
      const late = targets.filter((w) => !results.has(w)).map((w) => `worker ${w.process.pid} did not answer within ${RELOAD_WAIT_MS / 1000} s`);
      let problems: string[] | null = [...new Set([...refused.flat(), ...late])];
      // every worker reads the same file, so they agree; a file changed while they read it may not
      if (problems.length > 0 && applied > 0) problems.push(`${applied} of ${targets.length} workers applied the file; the others kept the previous configuration (reload again)`);
      if (problems.length === 0) problems = null;
      if (asking.isConnected()) asking.send({ type: RELOAD_RESPONSE, id: askedId, problems } satisfies ReloadMessage, () => undefined);
    };
    const timer = setTimeout(finish, RELOAD_WAIT_MS);
    orders.set(id, (worker, problems) => {
      if (!targets.includes(worker) || results.has(worker)) return;
      results.set(worker, problems);
      if (results.size === targets.length) finish();
    });
    for (const worker of targets) {
      if (worker.isConnected()) worker.send({ type: RELOAD_ORDER, id } satisfies ReloadMessage, () => undefined);
    }
  };
  const fork = () => {
    const worker = cluster.fork();
    worker.on('message', (message: ReloadMessage) => {
      if (message.type === STARTED) {
        started.add(worker.id);
        everStarted = true;
        failedStarts = 0;
        return;
      }
      if (message.type === START_FAILED) {
        startFailures.set(worker.id, message as unknown as StartFailure);
        return;
      }
      if (message.type === LIMITER_REQUEST) {
        answerLimiterRequest(worker, limiter, message as unknown as LimiterRequest);
        return;
      }
      if (message.type === RELOAD_REQUEST) {
        reloadEveryWorker(worker, message.id);
        return;
      }
      if (message.type === RELOAD_RESULT) {
        if (message.id !== undefined) orders.get(message.id)?.(worker, message.problems ?? null);
        return;
      }
      if (message.type !== METRICS_REQUEST) return;
      aggregator.clusterMetrics().then(
        (text) => worker.send({ type: METRICS_RESPONSE, id: message.id, text }),
        () => worker.send({ type: METRICS_RESPONSE, id: message.id, text: null }),
      );
    });
    return worker;
  };
  // A worker that dies after it started (serve() done: every listener bound) is replaced at once. One
  // that dies before failed to start (a port taken, Redis unreachable or untrusted): if no worker has
  // ever started, the whole start failed and the primary says why once and exits 1 rather than
  // forking forever; otherwise the replacement waits 1 s, 2 s, 4 s … up to 30 s while starts keep
  // failing. Not cluster's 'listening': it comes at the first listener, and a worker whose second
  // port was taken counted as started, so it was replaced at once, forever.
  const started = new Set<number>();
  const startFailures = new Map<number, StartFailure>();
  let everStarted = false;
  let failedStarts = 0;
  cluster.on('exit', (worker: Worker, code, signal) => {
    // its last message (why it could not start) has been read once its channel is closed
    if (!worker.isConnected()) return ended(worker, code, signal);
    const timer = setTimeout(() => ended(worker, code, signal), 1_000);
    worker.once('disconnect', () => {
      clearTimeout(timer);
      ended(worker, code, signal);
    });
  });
  const ended = (worker: Worker, code: number | null, signal: string | null) => {
    const served = started.delete(worker.id);
    const told = startFailures.get(worker.id);
    // an Error again, so the log line reads as the worker's own would have
    const failure = told && { reason: told.reason, err: Object.assign(new Error(), told.err) };
    startFailures.delete(worker.id);
    if (stopping) {
      // a worker that never started had nothing in flight, whether the stop's signal ended its start
      // or its start failed as the one that stopped them all did; any other end than exit 0 may have
      // cut requests, and the exit code says so
      if (code === 0 || !served) return;
      log.error({ workerPid: worker.process.pid, code, signal }, 'a worker did not stop cleanly');
      exitCode = 1;
      return;
    }
    if (!served && !everStarted) {
      if (failure) {
        log.fatal({ workerPid: worker.process.pid, err: failure.err }, 'Portico could not start');
        console.error(`portico: ${failure.reason}`);
      } else {
        log.fatal({ workerPid: worker.process.pid, code, signal }, 'a worker could not start; stopping');
        console.error(`portico: a worker could not start (${signal ? `killed by ${signal}` : `exit code ${code}`}); see the log above`);
      }
      stop('SIGTERM', 1);
      return;
    }
    const delayMs = served ? 0 : Math.min(30_000, 1_000 * 2 ** failedStarts++);
    log.error({ workerPid: worker.process.pid, code, signal, delayMs, ...(failure ? { err: failure.err } : {}) }, served ? 'a worker died; starting a replacement' : 'a worker could not start; trying again');
    setTimeout(() => {
      if (!stopping) fork();
    }, delayMs);
  };
  // The kernel hands connections to workers (SCHED_NONE). With round-robin the primary accepts and
  // passes them on, and one passed to a worker that just died hangs forever (nodejs/node#21746).
  cluster.schedulingPolicy = cluster.SCHED_NONE;
  for (let i = 0; i < count; i++) fork();
  log.info({ workers: count }, `primary ${process.pid} runs ${count} workers`);

  const all = () => Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
  process.on('SIGHUP', () => {
    for (const worker of all()) worker.process.kill('SIGHUP');
  });
  function stop(signal: NodeJS.Signals, code = 0): void {
    if (stopping) {
      log.info({ signal }, 'already stopping');
      return;
    }
    stopping = true;
    exitCode = code;
    log.info({ signal }, 'stopping all workers');
    for (const worker of all()) worker.process.kill('SIGTERM');
    const check = setInterval(() => {
      if (all().length === 0) {
        clearInterval(check);
        log.flush?.();
        process.exit(exitCode);
      }
    }, 50);
  }
  process.on('SIGTERM', (signal) => stop(signal));
  process.on('SIGINT', (signal) => stop(signal));
}
