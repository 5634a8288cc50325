// Composition root: config → stores → limiter → certificates → handlers → listeners.
// The only file that names concrete backends. A reload builds the config-dependent handlers anew and
// swaps them in; listeners, stores and connections stay, so nothing in flight is dropped.
import { mkdirSync, readFileSync, existsSync } from 'node:fs';
import { loadConfig, restartOnlyChanges, type Config } from './config.ts';
import { createLogger, type Logger } from './log.ts';
import { createMetrics, type Metrics } from './metrics.ts';
import { openEmbeddedStores } from './state/embedded.ts';
import type { Stores } from './state/types.ts';
import type { RateLimiter } from './ratelimit/limiter.ts';
import { MemoryLimiter } from './ratelimit/memory-limiter.ts';
import { keepLimiterCounts } from './ratelimit/limiter-checkpoint.ts';
import { InstanceLimiter } from './ratelimit/instance-limiter.ts';
import { watchRedis, type RedisWatch } from './state/redis-watch.ts';
import { ensureFallbackCertificate } from './certs/fallback.ts';
import { loadOrCreateToken } from './admin/token.ts';
import { openFileCertStores } from './certs/file-store.ts';
import { createCertificateManager, type CertificateManager } from './certs/manager.ts';
import { createIssuing, type IssuingState } from './certs/issuing.ts';
import { openFileCaLimits } from './certs/ca-limits-file.ts';
import { openFileOrderQueue } from './certs/order-queue.ts';
import type { CertStores } from './certs/types.ts';
import { createOcspStapler } from './certs/ocsp.ts';
import { fileTicketKeys, redisTicketKeys, rotateTicketKeys, type TicketKeySource } from './certs/ticket-keys.ts';
import { createForwarder } from './proxy/forward.ts';
import { createProjectProxy } from './proxy/project-proxy.ts';
import { createRouteTable } from './routing/route.ts';
import { followChanges, loadRoutes } from './routing/sync.ts';
import { START_READ_WAIT_MS } from './state/start-reads.ts';
import { createScheduler } from './domains/scheduler.ts';
import { createDomainChecks } from './domains/rechecks.ts';
import { projectTurns } from './domains/project-turns.ts';
import type { Resolver } from './domains/verifier.ts';
import { systemResolver } from './domains/verifier.ts';
import { createListeners, type ListenerHandlers, type Listeners } from './edge/listeners.ts';
import { createTrust } from './edge/client-ip.ts';
import { redact, type RedisMode } from './state/redis-url.ts';
import { buildHandlers, type Shared } from './handlers.ts';
import { adminAnswers } from './admin/handler.ts';
import { checkedPair, readPlatformCertificate, refuse } from './reload-refusals.ts';

// tickets encrypted under one key resume for up to this long; then a full handshake and a new ticket
const TICKET_PERIOD_SECONDS = 12 * 3600;

export interface Running {
  listeners: Listeners;
  adminToken: string;
  certificates: CertificateManager;
  metrics: Metrics;
  /** re-reads the config file (and certificates); rejects with the reasons when it cannot apply */
  reload(): Promise<void>;
  /** graceful: stop accepting, finish in-flight requests (bounded by timeouts.shutdownMs), close state */
  stop(): Promise<void>;
}

export interface ServeOptions {
  /**
   * what POST /admin/reload runs instead of this process's own reload: with several workers, the
   * reload of every worker (cli/serve.ts); resolves once all have applied it
   */
  reloadEverywhere?: () => Promise<void>;
}

export async function serve(config: Config, log: Logger = createLogger(config.log.level), env: NodeJS.ProcessEnv = process.env, options: ServeOptions = {}): Promise<Running> {
  const metrics = createMetrics();
  mkdirSync(config.dataDir, { recursive: true });

  // 1. state: Redis when configured (shared), else the embedded log in the data dir
  let stores: Stores;
  let certStores: CertStores;
  let issuingState: IssuingState;
  let ticketKeys: TicketKeySource;
  let limiter: RateLimiter;
  // embedded: the limiter's counts and bans saved to the data dir (limiter-checkpoint.ts)
  let stopKeepingCounts: (() => Promise<void>) | null = null;
  let redisUp: Shared['redisUp'] = null;
  let redisWatch: RedisWatch | null = null;
  let redisMode: RedisMode | null = null;
  if (config.redis.url) {
    // the Redis backends, and ioredis (~0.17 s to load), only when state is shared
    const [{ connectRedis, openRedisCommands, openRedisStores }, { openRedisCertStores }, { RedisLimiter }, { FailoverLimiter }, { openRedisCaLimits }, { openRedisOrderQueue }] = await Promise.all([
      import('./state/redis.ts'),
      import('./certs/redis-store.ts'),
      import('./ratelimit/redis-limiter.ts'),
      import('./ratelimit/failover-limiter.ts'),
      import('./certs/ca-limits-redis.ts'),
      import('./certs/order-queue.ts'),
    ]);
    const connections = connectRedis(config.redis.url, {
      commandTimeoutMs: config.redis.commandTimeoutMs,
      replicasToAck: config.redis.replicasToAck,
      replicaAckTimeoutMs: config.redis.replicaAckTimeoutMs,
      onCommandError: (kind) => metrics.redisCommandErrors.inc({ kind }),
      onUnreplicatedWrite: () => metrics.redisUnreplicatedWrites.inc(),
      onTopologyEvent: (level, message, fields) => log[level](fields, message),
    });
    redisMode = connections.mode;
    // one command path for the stores and the certificates' (state/redis-commands.ts)
    const commands = openRedisCommands(connections);
    stores = await openRedisStores(connections, Date.now, commands);
    certStores = openRedisCertStores(commands, config.acme.directory);
    issuingState = {
      limits: openRedisCaLimits(connections.client, commands.call),
      queue: openRedisOrderQueue(connections.client, commands.call),
      accountKeys: (directory) => openRedisCertStores(commands, directory).accountKey,
    };
    ticketKeys = redisTicketKeys(connections.client, TICKET_PERIOD_SECONDS, commands.call);
    const failover = new FailoverLimiter(new RedisLimiter(connections), new InstanceLimiter(new MemoryLimiter(), config.redis.commandTimeoutMs), {
      mode: config.ratelimit.onRedisDown,
      onRedisState: () => redisWatch?.update(),
      onCommandError: (err) => {
        connections.health.failedAt = Date.now();
        connections.reportError(err, 'limiter');
      },
      // one server, Sentinel: the limiter's calls go to the server holding the state, so a state read
      // that has just timed out means the limiter's call would too. On a Cluster they may go to another node
      redisStalled: connections.mode === 'cluster' ? undefined : connections.justTimedOut,
      // the gauge and the log line follow Redis also when no /v1 request comes
      probeInBackground: true,
    });
    limiter = failover;
    const watch = watchRedis({
      ping: async () => (await stores.health()) === 'ok',
      connected: () => connections.client.status === 'ready',
      limiterUp: () => failover.redisUp,
      // some of a Cluster's primaries unreachable, not all: /readyz says degraded, never down (redis-watch.ts)
      limiterPartly: () => connections.mode === 'cluster' && !failover.unreachable.includes('') && connections.primaries().some((node) => !failover.unreachable.includes(node)),
      onChange: (up) => {
        metrics.redisUp.set(up ? 1 : 0);
        // down: why, when the connection said so (a command that timed out on a live connection says nothing)
        const why = up ? {} : { connection: connections.client.status, ...(connections.health.connectionError ? { err: connections.health.connectionError.message } : {}) };
        // a Cluster's limiter has a breaker per primary: the calls counted on the others are not concerned
        const limiterDown = failover.unreachable.filter((node) => node !== '');
        const where = !up && connections.mode === 'cluster' && limiterDown.length > 0 ? { unreachable: limiterDown } : {};
        const effect = connections.mode === 'cluster'
          ? config.ratelimit.onRedisDown === 'local' ? 'limits counted on an unreachable primary are enforced by this instance alone' : '/v1 calls counted on an unreachable primary answer 503'
          : config.ratelimit.onRedisDown === 'local' ? 'limits are enforced by this instance alone' : '/v1 answers 503';
        log.warn({ redis: up ? 'up' : 'down', ...why, ...where }, up ? 'Redis is back; shared limits in force again' : `Redis unreachable; ${effect} until it is back${config.ratelimit.onRedisDown === 'closed' ? ' (ratelimit.onRedisDown: closed)' : ''}`);
      },
    });
    metrics.redisUp.set(watch.up ? 1 : 0);
    connections.client.on('ready', () => void watch.check());
    connections.client.on('close', () => watch.update());
    redisWatch = watch;
    redisUp = () => watch.readiness();
    log.info({ redis: redact(config.redis.url), mode: connections.mode }, 'state in Redis (shared)');
  } else {
    stores = await openEmbeddedStores(config.dataDir, { onEvent: (level, message, fields) => log[level](fields, message) });
    certStores = openFileCertStores(config.certsDir, config.acme.directory);
    issuingState = { limits: openFileCaLimits(config.dataDir), queue: openFileOrderQueue(config.dataDir), accountKeys: (directory) => openFileCertStores(config.certsDir, directory).accountKey };
    ticketKeys = fileTicketKeys(config.dataDir);
    const counts = new MemoryLimiter();
    limiter = counts;
    stopKeepingCounts = await keepLimiterCounts(counts, config.dataDir, log);
    log.info({ dataDir: config.dataDir }, 'state embedded in the data dir');
  }
  let current = config;

  // 2. secrets on first start: the admin token and the fallback certificate
  const adminToken = config.admin.token ?? loadOrCreateToken(config.dataDir, log);
  if (config.redis.url && !config.admin.token) log.warn('PORTICO_ADMIN_TOKEN is not set: each instance on this Redis has its own token; set one token for all');
  const apiHosts = [...config.api.hosts, ...config.api.stagingHosts];
  const fallback = await ensureFallbackCertificate(config.certsDir, apiHosts);
  log.info({ certFile: fallback.certFile, keyFile: fallback.keyFile }, fallback.created ? `created the fallback certificate for ${[...new Set(['localhost', '*.localhost', ...apiHosts])].join(', ')}` : 'fallback certificate');

  // 3. routing and certificates (kept across reloads)
  const routes = createRouteTable(config.api.hosts, config.api.stagingHosts, config.platform.domain);
  await loadRoutes(stores, routes, config.redis.url ? START_READ_WAIT_MS : 0, log);
  followChanges(stores, routes, log);
  metrics.countDomainsWith(() => stores.domains.countByStatus());
  const forwarder = createForwarder(config.timeouts.upstreamMs, (kind) => metrics.upstreamErrors.inc({ kind }));
  // the resolvers of dns.servers as the configuration in force names them (a reload may change them)
  let resolver: { servers: string; resolver: Resolver } | null = null;
  const currentResolver = (): Resolver => {
    const servers = current.dns.servers.join(',');
    if (resolver?.servers !== servers) resolver = { servers, resolver: systemResolver(current.dns.servers) };
    return resolver.resolver;
  };
  const followingResolver: Resolver = {
    resolveCname: (name) => currentResolver().resolveCname(name),
    resolve4: (name) => currentResolver().resolve4(name),
    resolve6: (name) => currentResolver().resolve6(name),
    resolveCaa: (name) => currentResolver().resolveCaa(name),
    resolveTxt: (name) => currentResolver().resolveTxt(name),
  };
  // the ACME issuers in order, behind the CA limits and CAA (certs/issuing.ts)
  const issuing = createIssuing({
    issuers: config.acme.issuers,
    email: config.acme.email,
    state: issuingState,
    challenges: certStores.challenges,
    resolver: followingResolver,
    ...(env.NODE_EXTRA_CA_CERTS && existsSync(env.NODE_EXTRA_CA_CERTS) ? { ca: readFileSync(env.NODE_EXTRA_CA_CERTS, 'utf8') } : {}),
    metrics,
  });
  const certificates = createCertificateManager({ stores, certs: certStores, ...issuing, routes, platformDomain: config.platform.domain, platform: readPlatformCertificate(config), log, metrics, onDemandWaitMs: config.acme.onDemandWaitMs });

  // domains look after themselves: one scheduler for background work, its due times in the state backend
  const scheduler = createScheduler({ store: stores.schedule, log });
  certificates.useScheduler(scheduler);
  const domainTurns = projectTurns(certStores.locks);
  const checks = createDomainChecks({
    stores,
    scheduler,
    turns: domainTurns,
    metrics,
    log,
    onVerified: (domain, reason) => certificates.onVerified(domain, reason),
    context: () => ({ ...current.domains, cnameTarget: current.platform.cnameTarget, caaIdentities: current.acme.caaIdentities, accountUris: issuing.accountUris, resolver: currentResolver() }),
  });

  // 4. the handlers that depend on configuration, rebuilt on reload
  // read at each WebSocket: a reload sets timeoutMs
  const proxyOptions: Parameters<typeof createProjectProxy>[1] = { timeoutMs: config.timeouts.upstreamMs, onError: (kind) => metrics.upstreamErrors.inc({ kind }) };
  const proxy = createProjectProxy(forwarder, proxyOptions);
  const shared: Shared = { stores, certStores, domainTurns, limiter, metrics, log, forwarder, proxy, routes, certificates, checks, adminToken, redisUp, redisMode, reload: options.reloadEverywhere ?? (() => reload()), adminAnswers: adminAnswers(stores) };
  const handlers = buildHandlers(config, shared);
  const ocsp = createOcspStapler({ onError: (err) => log.warn({ err: (err as Error).message }, 'could not fetch an OCSP response to staple') });
  const listeners = createListeners({ config, fallback, secureContext: (name) => certificates.secureContext(name), handlers, ocsp, metrics, log, trust: createTrust(config.trustedProxies) });

  // 5. listen, then keep certificates fresh
  try {
    await listeners.listen();
  } catch (err) {
    await stores.close();
    throw err;
  }
  certificates.start();
  scheduler.start();
  // domains stored before automatic checks existed get theirs (once per state backend, in the background)
  checks.seed().catch((err) => log.warn({ err: (err as Error).message }, 'could not schedule the first automatic DNS checks; trying again at the next start'));
  const stopTickets = rotateTicketKeys(ticketKeys, TICKET_PERIOD_SECONDS, (key) => listeners.setTicketKeys(key), (err) =>
    log.warn({ err: (err as Error).message }, 'could not fetch the shared TLS ticket key; keeping the current one'),
  );
  const ports = listeners.ports();
  const edgeHost = config.listen.host === null ? '' : config.listen.host.includes(':') ? `[${config.listen.host}]` : config.listen.host;
  log.info({ ...ports, listenHost: config.listen.host, adminHost: config.admin.host }, `Portico listening: https ${edgeHost}:${ports.https}, http ${edgeHost}:${ports.http}, admin http://${config.admin.host}:${ports.admin}`);

  // All or nothing: everything that can fail (the file, the certificates) is read and checked first;
  // only then is anything swapped, so a refused reload leaves the previous configuration whole.
  async function reload(): Promise<void> {
    const next = loadConfig(env);
    const fixed = restartOnlyChanges(current, next);
    if (fixed.length > 0) throw Object.assign(new Error(`these settings need a restart: ${fixed.join(', ')}`), { problems: fixed.map((f) => `${f} changed; it needs a restart`) });
    const platform = checkedPair(() => readPlatformCertificate(next), `platform.certFile ${next.platform.certFile} / platform.keyFile ${next.platform.keyFile}`);
    const nextFallback = await ensureFallbackCertificate(next.certsDir, [...next.api.hosts, ...next.api.stagingHosts]).then(
      (pair) => checkedPair(() => pair, `the fallback certificate ${pair.certFile} / ${pair.keyFile}`),
      (err: Error) => refuse(`the fallback certificate in ${next.certsDir} cannot be read: ${err.message}`),
    );
    const trust = createTrust(next.trustedProxies);
    const logLevel = log.level;
    log.level = next.log.level;
    let nextHandlers: ListenerHandlers;
    try {
      nextHandlers = buildHandlers(next, shared);
    } catch (err) {
      log.level = logLevel;
      throw err;
    }
    // nothing below throws on what was checked above
    certificates.setPlatform(platform);
    listeners.setFallback(nextFallback);
    Object.assign(handlers, nextHandlers);
    routes.setApiHosts(next.api.hosts, next.api.stagingHosts);
    listeners.setTrust(trust);
    listeners.setTimeouts(next.timeouts);
    forwarder.setTimeout(next.timeouts.upstreamMs);
    proxyOptions.timeoutMs = next.timeouts.upstreamMs;
    current = next;
    log.info({ configFile: next.configFile }, 'configuration reloaded');
  }

  let stopping: Promise<void> | null = null;
  return {
    listeners,
    adminToken,
    certificates,
    metrics,
    reload,
    stop: () =>
      (stopping ??= (async () => {
        certificates.stop();
        await scheduler.stop();
        stopTickets();
        redisWatch?.stop();
        await listeners.close(current.timeouts.shutdownMs);
        await proxy.close();
        await forwarder.close();
        await stopKeepingCounts?.();
        await limiter.close();
        await stores.close();
      })()),
  };
}
