// The PORTICO_* variables: where each one lands in the YAML tree of config/portico.yaml, and how its
// text is read. config.ts applies them over the file before it validates anything.
import { FALSE_WORDS, TRUE_WORDS, isObject } from './config-reader.ts';

type Kind = 'port' | 'int' | 'string' | 'list' | 'bool' | 'url';

// variable → where it lands in the YAML tree, and how its text is read
const ENV: ReadonlyArray<[string, string, Kind]> = [
  ['PORTICO_LISTEN_HOST', 'listen.host', 'string'],
  ['PORTICO_HTTP_PORT', 'http.port', 'port'],
  ['PORTICO_HTTPS_PORT', 'https.port', 'port'],
  ['PORTICO_PUBLIC_HTTPS_PORT', 'https.publicPort', 'port'],
  ['PORTICO_HTTPS_KEY_EXCHANGE', 'https.keyExchange', 'list'],
  ['PORTICO_ADMIN_PORT', 'admin.port', 'port'],
  ['PORTICO_ADMIN_HOST', 'admin.host', 'string'],
  ['PORTICO_ADMIN_HOSTNAMES', 'admin.hostnames', 'list'],
  ['PORTICO_ADMIN_TOKEN', 'admin.token', 'string'],
  ['PORTICO_METRICS_PORT', 'metrics.port', 'port'],
  ['PORTICO_DATA_DIR', 'dataDir', 'string'],
  ['PORTICO_CERTS_DIR', 'certsDir', 'string'],
  ['PORTICO_REDIS_URL', 'redis.url', 'url'],
  ['PORTICO_REDIS_COMMAND_TIMEOUT_MS', 'redis.commandTimeoutMs', 'int'],
  ['PORTICO_REDIS_REPLICAS_TO_ACK', 'redis.replicasToAck', 'int'],
  ['PORTICO_REDIS_REPLICA_ACK_TIMEOUT_MS', 'redis.replicaAckTimeoutMs', 'int'],
  ['PORTICO_PLATFORM_DOMAIN', 'platform.domain', 'string'],
  ['PORTICO_PLATFORM_CERT_FILE', 'platform.certFile', 'string'],
  ['PORTICO_PLATFORM_KEY_FILE', 'platform.keyFile', 'string'],
  ['PORTICO_CNAME_TARGET', 'platform.cnameTarget', 'string'],
  ['PORTICO_DNS_SERVERS', 'dns.servers', 'list'],
  ['PORTICO_PENDING_RECHECK_MS', 'domains.pendingRecheckMs', 'int'],
  ['PORTICO_VERIFIED_RECHECK_MS', 'domains.verifiedRecheckMs', 'int'],
  ['PORTICO_ACME_DIRECTORY', 'acme.directory', 'list'],
  ['PORTICO_ACME_NEW_ORDERS_PER_3H', 'acme.limits.newOrdersPer3h', 'int'],
  ['PORTICO_ACME_CERTS_PER_DOMAIN_PER_WEEK', 'acme.limits.certsPerDomainPerWeek', 'int'],
  ['PORTICO_ACME_FAILED_VALIDATIONS_PER_HOUR', 'acme.limits.failedValidationsPerHour', 'int'],
  ['PORTICO_ACME_EMAIL', 'acme.email', 'string'],
  ['PORTICO_API_HOSTS', 'api.hosts', 'list'],
  ['PORTICO_STAGING_API_HOSTS', 'api.stagingHosts', 'list'],
  ['PORTICO_API_UPSTREAM', 'api.upstream', 'url'],
  ['PORTICO_TRUSTED_PROXIES', 'trustedProxies', 'list'],
  ['PORTICO_PROXY_PROTOCOL', 'proxyProtocol', 'bool'],
  ['PORTICO_RATELIMIT_ON_REDIS_DOWN', 'ratelimit.onRedisDown', 'string'],
  ['PORTICO_LOG_LEVEL', 'log.level', 'string'],
];

/** YAML path → the variable that sets it, so a problem names both */
export const VARIABLE_AT: ReadonlyMap<string, string> = new Map(ENV.map(([name, at]) => [at, name]));

/** Writes each set, non-empty PORTICO_* variable of `env` into `tree`, over what the file said. */
export function applyEnv(tree: Record<string, unknown>, env: NodeJS.ProcessEnv): void {
  for (const [name, at, kind] of ENV) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    setPath(tree, at, fromEnv(raw, kind));
  }
}

function fromEnv(raw: string, kind: Kind): unknown {
  switch (kind) {
    case 'port':
    case 'int':
      return /^\d+$/.test(raw.trim()) ? Number(raw.trim()) : raw;
    case 'list':
      return raw.split(',').map((s) => s.trim()).filter(Boolean);
    case 'bool':
      return TRUE_WORDS.includes(raw.trim().toLowerCase()) ? true : FALSE_WORDS.includes(raw.trim().toLowerCase()) ? false : raw;
    default:
      return raw;
  }
}

function setPath(tree: Record<string, unknown>, at: string, value: unknown): void {
  const parts = at.split('.');
  let node = tree;
  for (const part of parts.slice(0, -1)) {
    if (!isObject(node[part])) node[part] = {};
    node = node[part] as Record<string, unknown>;
  }
  node[parts[parts.length - 1]] = value;
}
