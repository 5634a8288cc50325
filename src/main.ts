// Composition root: config → stores → limiter → handlers → listeners → signals.
// The only file that names concrete backends.
import { mkdirSync, readFileSync, existsSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import type { Config } from './config.ts';
import { createLogger, type Logger } from './log.ts';
import { createMetrics } from './metrics.ts';
import { openEmbeddedStores } from './state/embedded.ts';
import { connectRedis, openRedisStores } from './state/redis.ts';
import type { Stores } from './state/types.ts';
import type { RateLimiter } from './ratelimit/limiter.ts';
import { MemoryLimiter } from './ratelimit/memory-limiter.ts';
import { RedisLimiter } from './ratelimit/redis-limiter.ts';
import { FailoverLimiter } from './ratelimit/failover-limiter.ts';
import { ensureFallbackCertificate, writeAtomic } from './certs/fallback.ts';
import { createForwarder } from './proxy/forward.ts';
import { createApi } from './api/v1.ts';
import { openapiDocument } from './api/openapi.ts';
import { createRouteTable } from './routing/route.ts';
import { followChanges, loadRoutes } from './routing/sync.ts';
import { createDomainRegistry } from './domains/registry.ts';
import { systemResolver } from './domains/verifier.ts';
import { createProjectProxy } from './proxy/project-proxy.ts';
import { createEdgeHandler, createUpgradeHandler } from './edge/pipeline.ts';
import { createHttpHandler } from './edge/http-listener.ts';
import { createListeners, type Listeners } from './edge/listeners.ts';
import { createTrust } from './edge/client-ip.ts';
import { createAdminHandler } from './admin/handler.ts';

export interface Running {
  listeners: Listeners;
  adminToken: string;
  /** graceful: stop accepting, finish in-flight requests (bounded by timeouts.shutdownMs), close state */
  stop(): Promise<void>;
}

export async function serve(config: Config, log: Logger = createLogger(config.log.level)): Promise<Running> {
  const metrics = createMetrics();
  mkdirSync(config.dataDir, { recursive: true });

  // 1. state: Redis when configured (shared), else the embedded log in the data dir
  let stores: Stores;
  let limiter: RateLimiter;
  let redisState: () => 'embedded' | 'ok' | 'degraded' | 'down';
  if (config.redis.url) {
    const connections = connectRedis(config.redis.url, config.redis.commandTimeoutMs);
    stores = await openRedisStores(connections);
    const failover = new FailoverLimiter(new RedisLimiter(connections.client), new MemoryLimiter(), {
      mode: config.ratelimit.onRedisDown,
      onRedisState: (up) => {
        metrics.redisUp.set(up ? 1 : 0);
        log.warn({ redis: up ? 'up' : 'down' }, up ? 'Redis is back; shared limits in force again' : 'Redis unreachable; serving from this instance');
      },
      onCommandError: () => {
        connections.health.failedAt = Date.now();
        metrics.redisCommandErrors.inc();
      },
    });
    limiter = failover;
    metrics.redisUp.set(connections.client.status === 'ready' ? 1 : 0);
    connections.client.on('ready', () => metrics.redisUp.set(1));
    connections.client.on('close', () => metrics.redisUp.set(0));
    redisState = () => (connections.client.status === 'ready' ? 'ok' : config.ratelimit.onRedisDown === 'local' ? 'degraded' : 'down');
    log.info({ redis: redactUrl(config.redis.url) }, 'state in Redis (shared)');
  } else {
    stores = await openEmbeddedStores(config.dataDir);
    limiter = new MemoryLimiter();
    redisState = () => 'embedded';
    log.info({ dataDir: config.dataDir }, 'state embedded in the data dir');
  }

  // 2. secrets on first start: the admin token and the fallback certificate
  const adminToken = config.admin.token ?? loadOrCreateToken(config.dataDir, log);
  if (config.redis.url && !config.admin.token) log.warn('PORTICO_ADMIN_TOKEN is not set: each instance on this Redis has its own token; set one token for all');
  const fallback = await ensureFallbackCertificate(config.certsDir, [...config.api.hosts, ...config.api.stagingHosts]);
  log.info({ certFile: fallback.certFile, keyFile: fallback.keyFile }, fallback.created ? 'created the fallback certificate for localhost, *.localhost' : 'fallback certificate');

  // 3. handlers
  const forwarder = createForwarder(config.timeouts.upstreamMs, (kind) => metrics.upstreamErrors.inc({ kind }));
  const api = createApi({
    config,
    stores,
    limiter,
    forwarder,
    openapi: () => openapiDocument(config),
    onAuthFailure: () => metrics.authFailures.inc(),
    onDecision: (plan, decision) => metrics.ratelimitDecisions.inc({ plan, decision: decision === 'ok' ? 'allowed' : decision }),
  });
  const trust = createTrust(config.trustedProxies);
  const routes = createRouteTable(config.api.hosts, config.api.stagingHosts, config.platform.domain);
  await loadRoutes(stores, routes);
  followChanges(stores, routes, log);
  metrics.countDomainsWith(() => stores.domains.countByStatus());
  const domains = createDomainRegistry({ config, stores, resolver: systemResolver(config.dns.servers) });
  const proxy = createProjectProxy(forwarder, { timeoutMs: config.timeouts.upstreamMs, onError: (kind) => metrics.upstreamErrors.inc({ kind }) });
  const edgeDeps = { routes, proxy, publicHttpsPort: config.https.publicPort, api, metrics, log, trust };
  const readiness = async (): Promise<{ status: number; body: Record<string, string> }> => {
    const state = redisState();
    if (state === 'embedded') return { status: 200, body: { status: 'ok', state: 'embedded' } };
    const redis = state === 'ok' && (await stores.health()) === 'down' ? (config.ratelimit.onRedisDown === 'local' ? 'degraded' : 'down') : state;
    return { status: redis === 'down' ? 503 : 200, body: { status: redis === 'down' ? 'unavailable' : 'ok', redis } };
  };
  const adminDeps = { config, adminToken, stores, domains, metrics, log, readiness };
  const listeners = createListeners({
    config,
    fallback,
    secureContext: async () => null,
    edge: createEdgeHandler(edgeDeps),
    upgrade: createUpgradeHandler(edgeDeps),
    http: createHttpHandler({ publicHttpsPort: config.https.publicPort, challenge: async () => null, metrics }),
    admin: createAdminHandler(adminDeps),
    metricsOnly: config.metrics.port === null ? null : createAdminHandler(adminDeps, { metricsOnly: true }),
    metrics,
    trust,
  });

  // 4. listen
  try {
    await listeners.listen();
  } catch (err) {
    await stores.close();
    throw err;
  }
  const ports = listeners.ports();
  log.info({ ...ports, adminHost: config.admin.host }, `Portico listening: https :${ports.https}, http :${ports.http}, admin http://${config.admin.host}:${ports.admin}`);

  let stopping: Promise<void> | null = null;
  return {
    listeners,
    adminToken,
    stop: () =>
      (stopping ??= (async () => {
        await listeners.close(config.timeouts.shutdownMs);
        await proxy.close();
        await forwarder.close();
        await limiter.close();
        await stores.close();
      })()),
  };
}

/** The admin token given in config, or the one saved in the data dir on first start. */
function loadOrCreateToken(dataDir: string, log: Logger): string {
  const file = path.join(dataDir, 'admin-token');
  if (existsSync(file)) {
    const token = readFileSync(file, 'utf8').trim();
    if (token.length >= 16) {
      log.info({ tokenFile: file }, 'admin token from the data dir');
      return token;
    }
  }
  const token = randomBytes(24).toString('base64url');
  writeAtomic(file, `${token}\n`, 0o600);
  log.info({ tokenFile: file }, 'created an admin token; the CLI reads it from this file, or set PORTICO_ADMIN_TOKEN');
  return token;
}

function redactUrl(url: string): string {
  const parsed = new URL(url);
  if (parsed.password) parsed.password = '***';
  return parsed.toString();
}
