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

/** the PORTICO_* variables read outside the table: which file, and the CLI's own */
const OTHER_VARIABLES = ['PORTICO_CONFIG', 'PORTICO_ADMIN_URL', 'PORTICO_CLI_TIMEOUT_MS', 'PORTICO_COMPILE_CACHE'];
const KNOWN: ReadonlySet<string> = new Set([...ENV.map(([name]) => name), ...OTHER_VARIABLES]);

/** lists whose reader refuses an empty one with its own reason */
const NEEDS_AN_ENTRY: ReadonlySet<string> = new Set(['api.hosts', 'https.keyExchange', 'acme.directory']);

/**
 * Writes each set, non-empty PORTICO_* variable of `env` into `tree`, over what the file said. An
 * empty variable is an unset one; a list variable with no entry in it (" ", ",") is a problem: it
 * would silently list nothing where an empty one keeps the file's setting.
 */
export function applyEnv(tree: Record<string, unknown>, env: NodeJS.ProcessEnv, problems: string[]): void {
  for (const [name, at, kind] of ENV) {
    const raw = env[name];
    if (raw === undefined || raw === '' || shadowedByServiceLink(name, env)) continue;
    const value = fromEnv(raw, kind);
    if (Array.isArray(value) && value.length === 0 && !NEEDS_AN_ENTRY.has(at)) {
      problems.push(`${at} (${name}) lists nothing, got ${JSON.stringify(raw)}: an empty or unset variable keeps the file's setting (\`${at}: []\` there lists none)`);
      continue;
    }
    setPath(tree, at, value);
  }
}

/**
 * One line for each PORTICO_* variable of `env` that Portico does not read, naming the known one it
 * is closest to. Kubernetes' service links for a Service named portico* (PORTICO_PORT,
 * PORTICO_SERVICE_HOST, PORTICO_PORT_443_TCP_ADDR …) are not mistakes.
 */
export function unknownVariables(env: NodeJS.ProcessEnv): string[] {
  return Object.keys(env)
    .filter((name) => name.startsWith('PORTICO_') && !KNOWN.has(name) && !serviceLink(name, env[name] ?? ''))
    .sort()
    .map((name) => {
      const near = closest(name);
      return `${name} is not a variable Portico reads; it is ignored${near ? `. Did you mean ${near}?` : ''}`;
    });
}

const PORT_VARIABLES: ReadonlySet<string> = new Set(ENV.filter(([, , kind]) => kind === 'port').map(([name]) => name));

/**
 * A port variable holding a Kubernetes service link: a Service named portico-admin (-http, -https,
 * -metrics) in the pod's namespace sets PORTICO_ADMIN_PORT=tcp://10.96.0.21:9180 beside
 * PORTICO_ADMIN_SERVICE_HOST. Not the operator's setting: ignored, with a line saying so, where
 * reading it stopped the start ("must be a port").
 */
function shadowedByServiceLink(name: string, env: NodeJS.ProcessEnv): boolean {
  if (!PORT_VARIABLES.has(name)) return false;
  return /^(tcp|udp|sctp):\/\/\S+:\d+$/.test(env[name] ?? '') && Boolean(env[`${name.slice(0, -'_PORT'.length)}_SERVICE_HOST`]);
}


/** one line for each port variable a Kubernetes service link has set (shadowedByServiceLink) */
export function serviceLinkWarnings(env: NodeJS.ProcessEnv): string[] {
  return ENV.filter(([name]) => shadowedByServiceLink(name, env)).map(([name, at]) => {
    const service = name.slice(0, -'_PORT'.length).toLowerCase().replaceAll('_', '-');
    return `${name}=${env[name]} is the Kubernetes service link of a Service named ${service}, not a port: ignored, ${at} keeps the file's setting. Set enableServiceLinks: false in the pod spec (or name the Service otherwise) to be rid of it`;
  });
}

// https://kubernetes.io/docs/concepts/services-networking/service/#environment-variables:
// <SVC>_SERVICE_HOST, <SVC>_SERVICE_PORT[_<PORT NAME>], <SVC>_PORT=tcp://…, <SVC>_PORT_<n>_<PROTO>[_PROTO|_PORT|_ADDR]
function serviceLink(name: string, value: string): boolean {
  return /_SERVICE_(HOST|PORT(_[A-Z0-9_]+)?)$/.test(name) || /_PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?$/.test(name) || (/_PORT$/.test(name) && /^(tcp|udp|sctp):\/\//.test(value));
}

/** the known variable at most 2 edits away, or the same once underscores are dropped (PORTICO_ADMINTOKEN) */
function closest(name: string): string | null {
  let best: [string, number] | null = null;
  for (const known of KNOWN) {
    const d = known.replaceAll('_', '') === name.replaceAll('_', '') ? 0 : editDistance(name, known);
    if (d <= 2 && (best === null || d < best[1])) best = [known, d];
  }
  return best?.[0] ?? null;
}

function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) next[j] = Math.min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    row = next;
  }
  return row[b.length];
}

function fromEnv(raw: string, kind: Kind): unknown {
  switch (kind) {
    case 'port':
    case 'int':
      // past 2^53 a number is rounded (99999999999999999999 → 1e20): the text is kept, and echoed as typed
      return /^\d+$/.test(raw.trim()) && Number.isSafeInteger(Number(raw.trim())) ? Number(raw.trim()) : raw;
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
