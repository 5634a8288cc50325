// `portico serve [--workers N]`: one process, or a primary (serve-primary.ts) that runs N workers on
// the same ports. Here: the start, and a worker's life — serving, reloading, stopping once.
import cluster from 'node:cluster';
import { availableParallelism } from 'node:os';
import { ConfigError, loadConfig, type Config } from '../config.ts';
import { pino } from 'pino';
import { createLogger, type Logger } from '../log.ts';
import { loadOrCreateToken } from '../admin/token.ts';
import { ensureFallbackCertificate } from '../certs/fallback.ts';
import { persistCompileCache } from './compile-cache.ts';
import { joinClusterMetrics, reloadAllWorkers, RELOAD_ORDER, RELOAD_RESULT, START_FAILED, STARTED, type ReloadMessage, type StartFailure } from './cluster-messages.ts';
import { runPrimary } from './serve-primary.ts';

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
  // PORTICO_* variables Portico does not read (a misspelt one), said once at start (by the primary)
  if (cluster.isPrimary) for (const warning of config.warnings) log.warn(warning);
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
  // A signal while starting is taken once the start is complete: Node's default action ended the
  // process (exit 143 for SIGTERM, and SIGHUP too) whatever the start was doing
  const asked: { stop: NodeJS.Signals | null; reload: boolean } = { stop: null, reload: false };
  const whileStarting = (signal: NodeJS.Signals) => {
    if (signal === 'SIGHUP') asked.reload = true;
    else asked.stop ??= signal;
    log.info({ signal }, signal === 'SIGHUP' ? 'reload asked while starting: reloading once started' : 'stop asked while starting: stopping once started');
  };
  for (const signal of SIGNALS) process.on(signal, whileStarting);
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
  const reload = () => {
    running.reload().then(
      () => undefined,
      (err) => log.error({ problems: (err as { problems?: string[] }).problems ?? [(err as Error).message] }, 'reload refused; the previous configuration stays in force'),
    );
  };
  for (const signal of SIGNALS) process.off(signal, whileStarting);
  process.on('SIGHUP', reload);
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  if (asked.stop !== null) stop(asked.stop);
  else if (asked.reload) reload();
}

const SIGNALS: NodeJS.Signals[] = ['SIGTERM', 'SIGINT', 'SIGHUP'];
