// The only reader of process.env. Loads config/portico.yaml (or PORTICO_CONFIG), applies the
// PORTICO_* overrides, validates everything at once and returns a frozen object.
import path from 'node:path';
import net from 'node:net';
import type { Limit } from './ratelimit/limiter.ts';
import { Reader } from './config-reader.ts';
import { VARIABLE_AT, applyEnv, serviceLinkWarnings, unknownVariables } from './config-env.ts';
import { acmeDirectoryProblems, acmeEmail, dnsServerProblem, ipAddress, keyExchangeProblems } from './config-checks.ts';
import { parseRedisUrl } from './state/redis-url.ts';
import { directoryProblems, platformPairProblems } from './config-files.ts';
import { readAcme, type IssuerSettings } from './certs/issuers.ts';
import { ConfigError, configFileOf, parseTree, readText, resolvePath } from './config-source.ts';

// finding the file and the CLI's reading of it live apart; exported here so callers import config.ts alone
export { ConfigError, configFileOf } from './config-source.ts';
export { cliSettings } from './config-cli.ts';

export type Plan = 'free' | 'pro' | 'business' | 'enterprise';
export const PLANS: readonly Plan[] = ['free', 'pro', 'business', 'enterprise'];

export interface Config {
  configFile: string;
  /** host: the address the HTTP and HTTPS listeners bind to; null: every interface */
  listen: { host: string | null };
  http: { port: number };
  /** keyExchange: the TLS key exchange groups accepted, in order of preference; null: Portico's default (edge/tls-options.ts) */
  https: { port: number; publicPort: number; keyExchange: string[] | null };
  /** hostnames: names besides IP addresses and localhost that requests to the admin listeners may carry as Host */
  admin: { port: number; host: string; token: string | null; hostnames: string[] };
  metrics: { port: number | null };
  dataDir: string;
  certsDir: string;
  /** replicasToAck: null = by topology (1 on Sentinel and Cluster, 0 on one server) */
  redis: { url: string | null; commandTimeoutMs: number; replicasToAck: number | null; replicaAckTimeoutMs: number };
  platform: { domain: string; certFile: string | null; keyFile: string | null; cnameTarget: string };
  dns: { servers: string[] };
  /** automatic DNS checks (src/domains/rechecks.ts): a pending domain's first wait (doubling up to 6 h), a verified domain's period */
  domains: { pendingRecheckMs: number; verifiedRecheckMs: number };
  /**
   * issuers: the ACME CAs in order of preference (certs/issuers.ts); directory: the first one's;
   * caaIdentities: every issuer's CAA identities (verification passes when CAA allows any of them)
   */
  acme: { directory: string; issuers: IssuerSettings[]; email: string | null; caaIdentities: string[]; onDemandWaitMs: number };
  api: {
    hosts: string[];
    stagingHosts: string[];
    upstream: string | null;
    maxCategories: number;
    maxBodyBytes: number;
    pets: { deprecatedAt: string; sunsetAt: string; link: string };
  };
  trustedProxies: string[];
  proxyProtocol: boolean;
  ratelimit: {
    onRedisDown: 'local' | 'closed';
    plans: Record<Exclude<Plan, 'enterprise'>, Limit>;
    ban: { refusals: number; windowSeconds: number; banSeconds: number };
  };
  timeouts: { headersMs: number; requestMs: number; keepAliveMs: number; upstreamMs: number; shutdownMs: number };
  log: { level: string };
  /** said once at start, not refused: PORTICO_* variables that nothing reads (a typo, with the name it is close to) */
  warnings: string[];
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): Config {
  const configFile = configFileOf(env, cwd);
  return parseConfig(readText(configFile), configFile, env, cwd);
}

export function parseConfig(text: string, configFile: string, env: NodeJS.ProcessEnv, cwd: string): Config {
  const problems: string[] = [];
  const tree = parseTree(text, configFile);
  applyEnv(tree, env, problems);
  const read = new Reader(tree, problems, VARIABLE_AT);
  const config: Config = {
    configFile,
    listen: { host: ipAddress(read.optionalString('listen.host'), 'listen.host (PORTICO_LISTEN_HOST)', '127.0.0.1, 0.0.0.0, ::1 or :: (null or unset: every interface)', problems) },
    http: { port: read.port('http.port', 8080) },
    https: { port: read.port('https.port', 8443), publicPort: read.port('https.publicPort', 443, 1), keyExchange: read.optionalList('https.keyExchange') },
    admin: {
      port: read.port('admin.port', 9180),
      host: ipAddress(read.string('admin.host', '127.0.0.1'), 'admin.host (PORTICO_ADMIN_HOST)', '127.0.0.1 or ::1', problems) ?? '127.0.0.1',
      token: read.secret('admin.token'),
      hostnames: read.hostnames('admin.hostnames', [], false),
    },
    metrics: { port: read.optionalPort('metrics.port') },
    dataDir: resolvePath(cwd, read.string('dataDir', './data')),
    certsDir: resolvePath(cwd, read.string('certsDir', './certs')),
    redis: {
      url: redisUrl(read.optionalString('redis.url'), problems),
      commandTimeoutMs: read.ms('redis.commandTimeoutMs', 150, 10),
      replicasToAck: nullWhenNegative(read.int('redis.replicasToAck', -1, 0)),
      replicaAckTimeoutMs: read.ms('redis.replicaAckTimeoutMs', 200, 1),
    },
    platform: {
      domain: read.hostname('platform.domain', 'localhost'),
      certFile: optionalPath(cwd, read.optionalString('platform.certFile')),
      keyFile: optionalPath(cwd, read.optionalString('platform.keyFile')),
      cnameTarget: read.hostname('platform.cnameTarget', 'edge.localhost'),
    },
    dns: { servers: read.list('dns.servers', []) },
    domains: { pendingRecheckMs: read.ms('domains.pendingRecheckMs', 60_000, 100), verifiedRecheckMs: read.ms('domains.verifiedRecheckMs', 86_400_000, 100) },
    acme: readAcme(read, problems, Boolean(env.PORTICO_ACME_DIRECTORY)),
    api: {
      hosts: read.hostnames('api.hosts', ['api.localhost', 'localhost', '127.0.0.1'], true),
      stagingHosts: read.hostnames('api.stagingHosts', ['api.staging.localhost'], false),
      upstream: read.optionalUrl('api.upstream', ['http:', 'https:']),
      maxCategories: read.int('api.maxCategories', 10000, 1),
      maxBodyBytes: read.int('api.maxBodyBytes', 65536, 1),
      pets: {
        deprecatedAt: read.date('api.pets.deprecatedAt', '2026-01-01T00:00:00Z'),
        sunsetAt: read.date('api.pets.sunsetAt', '2027-07-01T00:00:00Z'),
        link: read.string('api.pets.link', 'https://docs.portico.dev/v1/pets#deprecation'),
      },
    },
    trustedProxies: read.list('trustedProxies', []),
    proxyProtocol: read.bool('proxyProtocol', false),
    ratelimit: {
      onRedisDown: read.oneOf('ratelimit.onRedisDown', ['local', 'closed'] as const, 'local'),
      plans: {
        free: read.limit('ratelimit.plans.free', { perMinute: 60, perDay: 1000 }),
        pro: read.limit('ratelimit.plans.pro', { perMinute: 300, perDay: 10000 }),
        business: read.limit('ratelimit.plans.business', { perMinute: 1000, perDay: 100000 }),
      },
      ban: {
        refusals: read.int('ratelimit.ban.refusals', 10, 1),
        windowSeconds: read.int('ratelimit.ban.windowSeconds', 60, 1),
        banSeconds: read.int('ratelimit.ban.banSeconds', 900, 1),
      },
    },
    timeouts: {
      headersMs: read.ms('timeouts.headersMs', 10000, 100),
      requestMs: read.ms('timeouts.requestMs', 60000, 100),
      keepAliveMs: read.ms('timeouts.keepAliveMs', 5000, 100),
      upstreamMs: read.ms('timeouts.upstreamMs', 30000, 10),
      shutdownMs: read.ms('timeouts.shutdownMs', 10000, 0),
    },
    log: { level: read.oneOf('log.level', ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const, 'info') },
    warnings: [...unknownVariables(env), ...serviceLinkWarnings(env)],
  };
  config.acme.email = acmeEmail(config.acme.email, problems);
  problems.push(...acmeDirectoryProblems(read.value('acme.directory')));
  if (config.admin.token !== null && config.admin.token.length < 16) {
    problems.push('admin.token (PORTICO_ADMIN_TOKEN) must be at least 16 characters');
  }
  for (const cidr of config.trustedProxies) {
    if (!parseCidr(cidr)) problems.push(`trustedProxies (PORTICO_TRUSTED_PROXIES): "${cidr}" is not an IP address or CIDR`);
  }
  for (const server of config.dns.servers) {
    const problem = dnsServerProblem(server);
    if (problem) problems.push(`dns.servers (PORTICO_DNS_SERVERS): ${JSON.stringify(server)} ${problem}`);
  }
  const both = config.api.hosts.filter((h) => config.api.stagingHosts.includes(h));
  if (both.length > 0) {
    problems.push(`api.hosts (PORTICO_API_HOSTS) and api.stagingHosts (PORTICO_STAGING_API_HOSTS) both list ${both.map((h) => JSON.stringify(h)).join(', ')}: a hostname serves one environment`);
  }
  if ((config.platform.certFile === null) !== (config.platform.keyFile === null)) {
    problems.push('platform.certFile and platform.keyFile (PORTICO_PLATFORM_CERT_FILE / _KEY_FILE) go together');
  } else if (config.platform.certFile !== null && config.platform.keyFile !== null) {
    problems.push(...platformPairProblems(path.resolve(cwd, config.platform.certFile), path.resolve(cwd, config.platform.keyFile)));
  }
  problems.push(...directoryProblems('dataDir (PORTICO_DATA_DIR)', config.dataDir), ...directoryProblems('certsDir (PORTICO_CERTS_DIR)', config.certsDir));
  // the headers are part of the request: Node refuses a listener whose header deadline is the later one
  if (config.timeouts.headersMs > config.timeouts.requestMs) {
    problems.push(`timeouts.headersMs (${config.timeouts.headersMs}) must not exceed timeouts.requestMs (${config.timeouts.requestMs})`);
  }
  if (config.https.keyExchange !== null) problems.push(...keyExchangeProblems(config.https.keyExchange));
  // the PROXY header is read only from a trusted proxy: with none, every connection would be cut
  if (config.proxyProtocol && config.trustedProxies.length === 0) {
    problems.push('proxyProtocol (PORTICO_PROXY_PROTOCOL) is on but trustedProxies (PORTICO_TRUSTED_PROXIES) is empty: every connection carrying a PROXY header would be refused; list the addresses of the proxies that send it');
  }
  const ports: Array<[string, number | null]> = [['http.port', config.http.port], ['https.port', config.https.port], ['admin.port', config.admin.port], ['metrics.port', config.metrics.port]];
  for (let i = 0; i < ports.length; i++) {
    for (let j = i + 1; j < ports.length; j++) {
      if (ports[i][1] && ports[i][1] === ports[j][1]) problems.push(`${ports[i][0]} and ${ports[j][0]} are both ${ports[i][1]}`);
    }
  }
  read.unknownKeys();
  if (problems.length > 0) throw new ConfigError(problems);
  return deepFreeze(config);
}

/** One of the forms in redis-url.ts; a wrong one is a problem that names the accepted forms, never the password. */
function redisUrl(url: string | null, problems: string[]): string | null {
  if (url === null) return null;
  const parsed = parseRedisUrl(url);
  if (parsed instanceof Error) problems.push(`redis.url (PORTICO_REDIS_URL) ${parsed.message}`);
  return url;
}

const nullWhenNegative = (n: number): number | null => (n < 0 ? null : n);
const optionalPath = (cwd: string, value: string | null): string | null => (value === null ? null : resolvePath(cwd, value));

/** `10.0.0.0/8`, `::1/128` or a bare address → [address, prefix, family] */
export function parseCidr(text: string): [string, number, 'ipv4' | 'ipv6'] | null {
  const parts = text.split('/');
  if (parts.length > 2) return null;
  const [address, prefixText] = parts;
  const family = net.isIP(address);
  if (family === 0) return null;
  const max = family === 4 ? 32 : 128;
  // '10.0.0.1/' must not read as /0: that would trust every address
  if (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText)) return null;
  const prefix = prefixText === undefined ? max : Number(prefixText);
  if (prefix > max) return null;
  return [address, prefix, family === 4 ? 'ipv4' : 'ipv6'];
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

/** The settings that differ between `a` and `b` and that a running process cannot change (a reload that
 * changes them is refused): they name sockets, state or the shape of routing, or are read once by a part
 * built at start (the Redis connections, the failover limiter, the ACME issuing). Every other setting
 * applies on reload (main.ts). */
export function restartOnlyChanges(a: Config, b: Config): string[] {
  const pick = (c: Config) => ({
    'listen.host': c.listen.host,
    'http.port': c.http.port,
    'https.port': c.https.port,
    'https.keyExchange': c.https.keyExchange?.join(':') ?? null,
    'admin.port': c.admin.port,
    'admin.host': c.admin.host,
    'admin.token': c.admin.token,
    'admin.hostnames': c.admin.hostnames.join(','),
    'metrics.port': c.metrics.port,
    dataDir: c.dataDir,
    certsDir: c.certsDir,
    'redis.url': c.redis.url,
    'redis.commandTimeoutMs': c.redis.commandTimeoutMs,
    'redis.replicasToAck': c.redis.replicasToAck,
    'redis.replicaAckTimeoutMs': c.redis.replicaAckTimeoutMs,
    'platform.domain': c.platform.domain,
    'acme.directory': c.acme.directory,
    'acme.issuers': JSON.stringify(c.acme.issuers.map(({ limits: _limits, caa: _caa, ...issuer }) => issuer)),
    'acme.limits': JSON.stringify(c.acme.issuers.map((issuer) => issuer.limits)),
    'acme.caaIdentities': JSON.stringify(c.acme.issuers.map((issuer) => issuer.caa)),
    'acme.email': c.acme.email,
    'acme.onDemandWaitMs': c.acme.onDemandWaitMs,
    proxyProtocol: c.proxyProtocol,
    'ratelimit.onRedisDown': c.ratelimit.onRedisDown,
  });
  const before = pick(a);
  const after = pick(b);
  return Object.keys(before).filter((k) => before[k as keyof typeof before] !== after[k as keyof typeof after]);
}
