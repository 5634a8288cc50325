// Prometheus metrics. Portico's own carry the `portico_` prefix; process and Node defaults keep their
// standard names. Labels come from small fixed sets — never a hostname, path or key.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { REDIS_ERROR_KINDS } from './state/redis-errors.ts';
import { CounterTallies, TalliedHistogram, type Tally } from './metrics-tally.ts';
import type { Decision } from './ratelimit/limiter.ts';

export const ROUTE_LABELS = ['api', 'project', 'redirect', 'acme', 'unknown', 'admin'] as const;
export type RouteLabel = (typeof ROUTE_LABELS)[number];
/** the methods counted by name; any other is `OTHER` (a method is the visitor's to make up) */
export const METHOD_LABELS: readonly string[] = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'CONNECT'];

export function methodLabel(method: string | undefined): string {
  return method !== undefined && METHOD_LABELS.includes(method) ? method : 'OTHER';
}

export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  // prom-client names these gauges with a counter's `_total` suffix, which promtool rejects
  for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) registry.removeSingleMetric(name);
  let countDomains: (() => Promise<Record<string, number>>) | null = null;
  let collect: (() => Promise<string | null>) | null = null;
  // counted on the request path through cells (metrics-tally.ts), collected when read
  const answers = new CounterTallies<'route' | 'method' | 'status'>();
  const decisions = new CounterTallies<'plan' | 'decision'>();
  const httpDuration = new TalliedHistogram(
    'portico_http_request_duration_seconds',
    'Time from request to the end of the answer, by route.',
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  );
  registry.registerMetric(httpDuration.asMetric());
  return {
    registry,
    /** the exposition text: summed over every worker when running as one (see cli/serve.ts) */
    async text(): Promise<string> {
      return (collect && (await collect())) ?? registry.metrics();
    },
    collectWith(collector: () => Promise<string | null>) {
      collect = collector;
    },
    /** portico_domains is counted from the store when scraped */
    countDomainsWith(count: () => Promise<Record<string, number>>) {
      countDomains = count;
    },
    domains: new Gauge({
      name: 'portico_domains',
      help: 'Custom domains, by status.',
      labelNames: ['status'] as const,
      registers: [registry],
      // every worker counts the same store: summing would multiply
      aggregator: 'max',
      async collect() {
        if (!countDomains) return;
        const counts = await countDomains().catch(() => null);
        if (counts) for (const [status, n] of Object.entries(counts)) this.set({ status }, n);
      },
    }),
    httpRequests: new Counter({
      name: 'portico_http_requests_total',
      help: 'Requests answered, by route, method and status.',
      labelNames: ['route', 'method', 'status'] as const,
      registers: [registry],
      collect() {
        answers.collect(this);
      },
    }),
    /** cells of portico_http_requests_total for the request path */
    answers,
    httpDuration,
    /**
     * One answer given outside the request pipeline (the admin and HTTP listeners, a refusal before
     * routing): counted and its duration observed, as the pipeline does through answerMetrics.
     */
    answered(route: RouteLabel, method: string | undefined, status: number, seconds: number): void {
      this.httpRequests.inc({ route, method: methodLabel(method), status });
      httpDuration.observe(httpDuration.series({ route }), seconds);
    },
    upstreamErrors: new Counter({ name: 'portico_upstream_errors_total', help: 'Upstream failures, by kind.', labelNames: ['kind'] as const, registers: [registry] }),
    ratelimitDecisions: new Counter({
      name: 'portico_ratelimit_decisions_total',
      help: 'Rate limiter decisions, by plan and decision.',
      labelNames: ['plan', 'decision'] as const,
      registers: [registry],
      collect() {
        decisions.collect(this);
      },
    }),
    /** cells of portico_ratelimit_decisions_total for the request path */
    decisions,
    authFailures: new Counter({ name: 'portico_auth_failures_total', help: '/v1 calls without an active key.', registers: [registry] }),
    redisUp: new Gauge({ name: 'portico_redis_up', help: '1 when Redis answers; 0 when it does not, or in embedded mode.', registers: [registry], aggregator: 'min' }),
    // every kind prints 0 from the start, as an unlabelled counter would
    redisCommandErrors: zeroed(new Counter({
      name: 'portico_redis_command_errors_total',
      help: 'Redis commands that failed, by kind: timeout, connection, moved, ask, readonly, loading, tryagain, clusterdown, reply.',
      labelNames: ['kind'] as const,
      registers: [registry],
    }), REDIS_ERROR_KINDS),
    redisUnreplicatedWrites: new Counter({
      name: 'portico_redis_unreplicated_writes_total',
      help: 'Acknowledged writes that PORTICO_REDIS_REPLICAS_TO_ACK replicas did not confirm within PORTICO_REDIS_REPLICA_ACK_TIMEOUT_MS (answered anyway).',
      registers: [registry],
    }),
    acmeOrders: new Counter({ name: 'portico_acme_orders_total', help: 'ACME certificate orders, by result.', labelNames: ['result'] as const, registers: [registry] }),
    domainChecks: new Counter({ name: 'portico_domain_checks_total', help: 'DNS checks of domains (automatic and on request), by result: pass, fail (a record is missing or wrong), error (DNS did not answer).', labelNames: ['result'] as const, registers: [registry] }),
    acmeOrderDuration: new Histogram({ name: 'portico_acme_order_duration_seconds', help: 'Time to obtain a certificate.', buckets: [0.5, 1, 2, 5, 10, 30, 60, 120], registers: [registry] }),
    acmeQueueDepth: new Gauge({ name: 'portico_acme_queue_depth', help: 'Certificate orders waiting for a CA limit (shared by every instance).', registers: [registry], aggregator: 'max' }),
    acmeLimitRemaining: new Gauge({ name: 'portico_acme_limit_remaining', help: 'What is left of a CA limit Portico keeps, by issuer and limit (new_orders: per account).', labelNames: ['issuer', 'limit'] as const, registers: [registry], aggregator: 'min' }),
    certificates: new Gauge({ name: 'portico_certificates', help: 'Stored certificates, by time left.', labelNames: ['expires_in'] as const, registers: [registry], aggregator: 'max' }),
    certificatesEarliestExpiry: unset(new Gauge({ name: 'portico_certificates_earliest_expiry_timestamp_seconds', help: 'When the first stored certificate expires (Unix seconds); no sample while none is stored.', registers: [registry], aggregator: 'min' })),
    sniCacheHits: new Counter({ name: 'portico_sni_cache_hits_total', help: 'Handshakes answered from the SecureContext cache.', registers: [registry] }),
    sniCacheMisses: new Counter({ name: 'portico_sni_cache_misses_total', help: 'Handshakes for a domain that missed the SecureContext cache.', registers: [registry] }),
    tlsHandshakes: new Counter({ name: 'portico_tls_handshakes_total', help: 'TLS handshakes, by result.', labelNames: ['result'] as const, registers: [registry] }),
    http2Abuse: new Counter({ name: 'portico_http2_connections_closed_total', help: 'HTTP/2 connections Portico closed for abuse (GOAWAY ENHANCE_YOUR_CALM), by reason.', labelNames: ['reason'] as const, registers: [registry] }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;

function zeroed(counter: Counter<'kind'>, kinds: readonly string[]): Counter<'kind'> {
  for (const kind of kinds) counter.inc({ kind }, 0);
  return counter;
}

/**
 * A gauge without labels prints 0 until it is set; this one prints no sample until then (the
 * certificate manager sets it, and removes it again while there is nothing to tell): for a timestamp,
 * 0 is a value, 1970, on which an alert such as `expiry - time() < 7d` fires.
 */
function unset(gauge: Gauge): Gauge {
  gauge.remove();
  return gauge;
}

/** Counts limiter decisions by plan through cells found by plan, then decision (metrics-tally.ts). */
export function decisionCounter(metrics: Metrics): (plan: string, decision: Decision['reason']) => void {
  const byPlan = new Map<string, Map<Decision['reason'], Tally>>();
  return (plan, decision) => {
    let cells = byPlan.get(plan);
    if (cells === undefined) byPlan.set(plan, (cells = new Map()));
    let cell = cells.get(decision);
    if (cell === undefined) cells.set(decision, (cell = metrics.decisions.cell({ plan, decision: decision === 'ok' ? 'allowed' : decision })));
    cell.n++;
  };
}
