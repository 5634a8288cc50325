// The handlers that depend on configuration: built at start and anew at each reload (main.ts swaps
// them in). What they share lives for the process: stores, limiter, routes, certificates, the proxy.
import type { Config } from './config.ts';
import type { Logger } from './log.ts';
import { decisionCounter, type Metrics } from './metrics.ts';
import type { Stores } from './state/types.ts';
import type { RateLimiter } from './ratelimit/limiter.ts';
import type { CertificateManager } from './certs/manager.ts';
import type { CertStores } from './certs/types.ts';
import type { Forwarder } from './proxy/forward.ts';
import type { ProjectProxy } from './proxy/project-proxy.ts';
import { createApi } from './api/v1.ts';
import { openapiDocument } from './api/openapi.ts';
import type { RouteTable } from './routing/route.ts';
import { createDomainRegistry } from './domains/registry.ts';
import type { DomainChecks } from './domains/rechecks.ts';
import type { ProjectTurns } from './domains/project-turns.ts';
import { createEdgeHandler, createUpgradeHandler } from './edge/pipeline.ts';
import { createHttpHandler } from './edge/http-listener.ts';
import { createConnectHandler } from './edge/extended-connect.ts';
import type { ListenerHandlers } from './edge/listeners.ts';
import { createTrust } from './edge/client-ip.ts';
import type { RedisMode } from './state/redis-url.ts';
import { createAdminHandler, type LastAnswers } from './admin/handler.ts';

export interface Shared {
  /** DNS checks of domains, on request and by themselves (one scheduler for the process) */
  checks: DomainChecks;
  stores: Stores;
  certStores: CertStores;
  /** an owner's changes and the background checks of one project's domains take turns (across instances too) */
  domainTurns: ProjectTurns;
  limiter: RateLimiter;
  metrics: Metrics;
  log: Logger;
  forwarder: Forwarder;
  /** one for the process: it owns the open WebSocket tunnels, which must outlive a reload */
  proxy: ProjectProxy;
  routes: RouteTable;
  certificates: CertificateManager;
  adminToken: string;
  /** Redis's state for /readyz, from a fresh PING (redis-watch.ts's readiness); null: embedded state */
  redisUp: (() => Promise<'up' | 'partly' | 'down'>) | null;
  /** the Redis topology (null: embedded) */
  redisMode: RedisMode | null;
  reload(): Promise<void>;
  /** the admin answers kept for a Redis outage, one cache for the process (admin/handler.ts adminAnswers) */
  adminAnswers: LastAnswers;
}

export function buildHandlers(config: Config, shared: Shared): ListenerHandlers {
  const { stores, metrics, log, routes, certificates } = shared;
  const trust = createTrust(config.trustedProxies);
  const api = createApi({
    config,
    stores,
    limiter: shared.limiter,
    forwarder: shared.forwarder,
    openapi: () => openapiDocument(config),
    onAuthFailure: () => metrics.authFailures.inc(),
    onDecision: decisionCounter(metrics),
  });
  const domains = createDomainRegistry({
    config,
    stores,
    checks: shared.checks,
    turns: shared.domainTurns,
    onRemoved: (hostname) => certificates.onRemoved(hostname),
  });
  const edgeDeps = { routes, proxy: shared.proxy, publicHttpsPort: config.https.publicPort, api, metrics, log, trust };
  const readiness = async (): Promise<{ status: number; body: Record<string, string> }> => {
    if (!shared.redisUp) {
      // embedded: ready while the data dir takes writes (a full disk answers every change 503)
      if ((await stores.health()) === 'ok') return { status: 200, body: { status: 'ok', state: 'embedded' } };
      return { status: 503, body: { status: 'unavailable', state: 'embedded', writes: 'failing' } };
    }
    // a Cluster with only some primaries unreachable: degraded also when `closed`, since the subjects
    // counted on the others are answered (a load balancer honouring 503 would pull every instance)
    const state = await shared.redisUp();
    const redis = state === 'up' ? 'ok' : state === 'partly' || config.ratelimit.onRedisDown === 'local' ? 'degraded' : 'down';
    return { status: redis === 'down' ? 503 : 200, body: { status: redis === 'down' ? 'unavailable' : 'ok', redis, mode: shared.redisMode ?? 'standalone' } };
  };
  // answers read under the configuration before are not given under this one
  shared.adminAnswers.forgetAll();
  const adminDeps = { config, adminToken: shared.adminToken, stores, domains, metrics, log, readiness, reload: shared.reload, lastAnswers: shared.adminAnswers };
  return {
    edge: createEdgeHandler(edgeDeps),
    upgrade: createUpgradeHandler(edgeDeps),
    connect: createConnectHandler(edgeDeps),
    http: createHttpHandler({ publicHttpsPort: config.https.publicPort, challenge: (token) => shared.certStores.challenges.get(token), metrics, log, trust }),
    admin: createAdminHandler(adminDeps),
    metricsOnly: createAdminHandler(adminDeps, { metricsOnly: true }),
  };
}
