// The ioredis options for each topology: what every connection shares (no offline queue, the command
// timeout, credentials, TLS), a Cluster's redirects and retries, one server's or the sentinels' address.
import type { ClusterOptions, RedisOptions } from 'ioredis';
import type { RedisTarget } from './redis-url.ts';
import { CLUSTER_KEY_PREFIX } from './cluster-state.ts';

export type CommonOptions = ReturnType<typeof commonOptions>;

const retryStrategy = (attempt: number) => Math.min(50 * attempt, 1000);
// an old primary that came back as a replica answers writes with READONLY: reconnect, which asks
// the sentinels again
const reconnectOnError = (err: Error) => err.message.startsWith('READONLY');

export function commonOptions(target: RedisTarget, commandTimeoutMs: number) {
  return {
    // no auto-pipelining: ioredis sends an auto-pipeline only once the one before it has settled, so
    // against a frozen server a command waited out the command timeout of the batch ahead of it before
    // its own began (a PING took 1.0 s with a 500 ms timeout). The stores' commands are few (their
    // reads are cached; /v1's per-request call is the limiter's own pipelined connection)
    // a dead Redis must fail requests at once, not queue them
    enableOfflineQueue: false,
    commandTimeout: commandTimeoutMs,
    maxRetriesPerRequest: 0,
    username: target.username,
    password: target.password,
    tls: target.tls ? {} : undefined,
  };
}

export function clusterOptions(common: CommonOptions, name: string, offline: boolean): ClusterOptions {
  return {
    enableOfflineQueue: offline,
    keyPrefix: CLUSTER_KEY_PREFIX,
    // a redirect or a failover is retried a few times, each command still bounded by commandTimeout
    maxRedirections: 6,
    retryDelayOnFailover: 50,
    retryDelayOnClusterDown: 100,
    retryDelayOnTryAgain: 20,
    retryDelayOnMoved: 0,
    slotsRefreshTimeout: 1000,
    clusterRetryStrategy: retryStrategy,
    // TLS certificates name the hosts as given; ioredis would otherwise resolve them first
    dnsLookup: (address, callback) => callback(null, address),
    // without `lazyConnect: false`: the cluster makes its node connections lazily and opens them
    // itself. Forced eager, a node first named in the slot map — every node, when the cluster names
    // them by hostname (cluster-preferred-endpoint-type hostname) — failed the cluster's ready check
    // ("Connection is closed") again and again, and the start with it
    redisOptions: { ...common, connectionName: name, commandTimeout: offline ? undefined : common.commandTimeout } as ClusterOptions['redisOptions'],
  } satisfies ClusterOptions;
}

// one server's address, or the sentinels' (with sentinel-switch.ts's Connector)
export function serverOptions(target: RedisTarget, common: CommonOptions, commandTimeoutMs: number, Connector: RedisOptions['Connector']): RedisOptions {
  const where: RedisOptions =
    target.mode === 'sentinel'
      ? {
          sentinels: target.addresses,
          name: target.name,
          // +switch-master is followed by sentinel-switch.ts, which leaves a connection already on the new
          // primary alone (ioredis's detector reconnects at every sentinel's announcement)
          failoverDetector: false,
          sentinelCommandTimeout: Math.max(commandTimeoutMs, 500),
          sentinelRetryStrategy: retryStrategy,
          enableTLSForSentinelMode: target.tls,
          sentinelTLS: target.tls ? {} : undefined,
          sentinelUsername: target.sentinelUsername,
          sentinelPassword: target.sentinelPassword,
          Connector,
        }
      : { host: target.addresses[0].host, port: target.addresses[0].port };
  return { ...common, ...where, lazyConnect: false, db: target.db, retryStrategy, reconnectOnError };
}
