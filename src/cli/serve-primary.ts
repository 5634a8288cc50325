// The primary of `portico serve --workers N`: runs N workers on the same ports (node:cluster), replaces
// a worker that dies, forwards SIGHUP/SIGTERM, and answers the workers' requests (cluster-messages.ts):
// metrics summed over all of them, a reload of every worker, and, while Redis is unreachable,
// rate-limit decisions from the instance's one limiter (ratelimit/instance-limiter.ts).
import cluster, { type Worker } from 'node:cluster';
import type { Logger } from '../log.ts';
import type { LimiterRequest } from '../ratelimit/instance-limiter.ts';
import {
  METRICS_REQUEST, METRICS_RESPONSE, RELOAD_ORDER, RELOAD_REQUEST, RELOAD_RESPONSE, RELOAD_RESULT, RELOAD_WAIT_MS, START_FAILED, STARTED,
  type ReloadMessage, type StartFailure,
} from './cluster-messages.ts';

export async function runPrimary(count: number, log: Logger): Promise<void> {
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
