// Connects to Redis in the topology PORTICO_REDIS_URL names (redis-url.ts). ioredis does the topology
// itself: for Sentinel it asks the sentinels for the primary and follows failovers (sentinel-switch.ts
// moves it at the sentinels' +switch-master notices); for Cluster it keeps the slot map, follows
// MOVED/ASK and re-subscribes pub/sub when a node goes away.
//
// Key layout on a Cluster: every state key is prefixed with the hash tag `{portico}:` (ioredis's
// keyPrefix), so all of them live in one slot. Every script and MULTI the stores run therefore works
// unchanged, and listings (the domain index, the renewal schedule, the project list) are one key or one
// hash: none needs a scan over every primary. State is small and changes rarely; what takes every
// request, the rate-limit counters, is one hash per account and environment (`portico:rl:{<subject>}`) and is
// spread over every primary. One server and Sentinel keep the unprefixed names, so existing data stays.
import { Cluster, Command, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { keySlot } from './redis-slot.ts';
import type { RedisMode, RedisTarget } from './redis-url.ts';
import { errorKind, withUrlHint, type RedisErrorKind } from './redis-errors.ts';
import { followSwitches, type TopologyEvents } from './sentinel-switch.ts';
import { replicaAcknowledgement } from './redis-replicas.ts';

/** the hash tag of every state key on a Cluster */
export const CLUSTER_KEY_PREFIX = '{portico}:';
const STATE_SLOT = keySlot(CLUSTER_KEY_PREFIX);
/** a command on the state's server timed out this recently: it is frozen, no caller waits on it again (see `justTimedOut`) */
const TIMED_OUT_MS = 250;
/** the state's node failed a PING: ioredis is asked to read the slot map again, at most this often */
const REFRESH_EVERY_MS = 100;

export interface RedisConnectOptions {
  commandTimeoutMs: number;
  /** replicas that must confirm an acknowledged write; null: 1 on Sentinel and Cluster, 0 on one server */
  replicasToAck?: number | null;
  replicaAckTimeoutMs?: number;
  onCommandError?(kind: RedisErrorKind): void;
  onUnreplicatedWrite?(): void;
  /** what an operator should see in the log: a Sentinel failover followed, sentinels that cannot be heard,
   * writes no longer (and again) confirmed by replicas */
  onTopologyEvent?: TopologyEvents;
}

export interface RedisConnections {
  mode: RedisMode;
  /** A Cluster offers the same commands as one server; the stores are typed against Redis and serve both. */
  client: Redis;
  subscriber: Redis;
  /** when any user of the client (stores, limiter) last saw a command fail, and last saw one time out; why it last lost its connection */
  health: { failedAt: number; timedOutAt: number; connectionError?: Error };
  /** the primary a limiter call on `slot` goes to now ("host:port"), from ioredis's view; null while it has none */
  primaryFor(slot: number): string | null;
  /** every primary ioredis names now, for any slot ("host:port"); empty while it names none */
  primaries(): string[];
  /** asks ioredis to look at the topology again (a MOVED, a READONLY, a lost node) */
  refreshTopology(): void;
  /**
   * after a write on the client: WAIT for replicas (§8); an unconfirmed write is counted, never refused.
   * Once a WAIT has come back short, later writes are counted without one until the primary names
   * enough replicas online again (looked at once a second at most).
   */
  acknowledge(): Promise<void>;
  /**
   * PING the server holding the state: on a Cluster the primary ioredis's slot map names for the state
   * slot, failing at once while it has no connection to it (ioredis would pick any node). Behind a WAIT of
   * ours on the same connection it also waits for that WAIT.
   */
  pingState(): Promise<unknown>;
  /**
   * A command on the server holding the state timed out less than 250 ms ago (`health.timedOutAt`): a
   * request's next command would only wait out the timeout again. A /v1 request makes a state read and
   * a limiter call one after the other, and each waited: two timeouts for one request.
   */
  justTimedOut(): boolean;
  /** Sentinel: resolves once every sentinel's failover events are listened to (a failover starting
   * before may be followed late, its writes to the old primary lost); at once on other topologies */
  sentinelsHeard: Promise<void>;
  /** credentials and TLS for a connection of the limiter's own */
  auth: { username?: string; password?: string; db: number; tls: boolean };
  /** counts a failed command by kind; `limiter`: one of the limiter's own connections */
  reportError(err: unknown, from?: 'state' | 'limiter'): void;
  options: RedisConnectOptions;
}

export function connectRedis(target: RedisTarget, options: RedisConnectOptions): RedisConnections {
  const { commandTimeoutMs } = options;
  const replicasToAck = options.replicasToAck ?? (target.mode === 'standalone' ? 0 : 1);
  const ackTimeoutMs = options.replicaAckTimeoutMs ?? 200;
  const common = {
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
  const retryStrategy = (attempt: number) => Math.min(50 * attempt, 1000);
  // an old primary that came back as a replica answers writes with READONLY: reconnect, which asks
  // the sentinels again
  const reconnectOnError = (err: Error) => err.message.startsWith('READONLY');
  const health: RedisConnections['health'] = { failedAt: -Infinity, timedOutAt: -Infinity };

  let client: Redis;
  let subscriber: Redis;
  // a failover announced by the sentinels moves both connections at once instead of at their next
  // failure, and keeps them off a primary the announcement replaced (sentinel-switch.ts)
  const follower = target.mode === 'sentinel' ? followSwitches(target, options.onTopologyEvent) : null;
  if (target.mode === 'cluster') {
    const make = (name: string, offline: boolean) =>
      new Cluster(target.addresses, {
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
      } satisfies ClusterOptions) as unknown as Redis;
    client = make('portico', false);
    subscriber = make('portico-sub', true);
  } else {
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
            Connector: follower?.Connector,
          }
        : { host: target.addresses[0].host, port: target.addresses[0].port };
    const base = { ...common, ...where, lazyConnect: false, db: target.db, retryStrategy, reconnectOnError };
    client = new Redis({ ...base, connectionName: 'portico' });
    subscriber = new Redis({ ...base, enableOfflineQueue: true, commandTimeout: undefined, connectionName: 'portico-sub' });
  }
  if (follower) {
    follower.follow([client, subscriber]);
    client.once('end', () => follower.close());
  }
  // errors are reported through health(), metrics and request outcomes; without a listener ioredis logs them.
  // A Cluster's nodes tell theirs through cluster-start-errors.ts.
  let answered = false;
  client.on('ready', () => {
    answered = true;
    // what failed before is not why a later command fails
    health.connectionError = undefined;
  });
  client.on('error', (err: Error) => {
    const told = target.mode === 'cluster' ? err : withUrlHint(err, target, answered);
    health.connectionError = follower ? follower.explain(withSentinelHint(told, target)) : told;
  });
  subscriber.on('error', () => undefined);

  const cluster = target.mode === 'cluster' ? (client as unknown as Cluster) : null;

  // called for every limiter call: the cluster's slot map already holds "host:port"
  const standalone = `${target.addresses[0].host}:${target.addresses[0].port}`;
  let sentinelPrimary: { stream: object | null; key: string } = { stream: null, key: '' };
  const primaryFor = (slot: number): string | null => {
    if (cluster) return cluster.slots[slot]?.[0] ?? null;
    if (target.mode === 'standalone') return standalone;
    // Sentinel: the primary is where ioredis's connection is, once it is ready there (each connection
    // is a new stream). Over TLS by the name the sentinels gave (`_host`, what net.Socket connected to):
    // the certificate names that, and with announce-hostnames not the address.
    const stream = (client as unknown as { stream?: { remoteAddress?: string; remotePort?: number; _host?: unknown } }).stream;
    if (client.status !== 'ready' || !stream) return null;
    if (sentinelPrimary.stream !== stream) {
      if (!stream.remoteAddress || !stream.remotePort) return null;
      const host = target.tls && typeof stream._host === 'string' && stream._host !== '' ? stream._host : stream.remoteAddress;
      sentinelPrimary = { stream, key: `${host}:${stream.remotePort}` };
    }
    return sentinelPrimary.key;
  };

  const primaries = (): string[] => {
    if (!cluster) {
      const primary = primaryFor(0);
      return primary ? [primary] : [];
    }
    const owners = new Set<string>();
    for (const slot of cluster.slots) if (slot?.[0]) owners.add(slot[0]);
    return [...owners];
  };

  // The connection to the primary ioredis's slot map names for the state slot, or an error when it has
  // none. Not ioredis's routing for a command given the slot: when the node it names has no connection
  // (a killed primary's leaves the pool at once; the slot map names it until the failover ends) that
  // picks any other node. A PING there answered PONG, so the view of Redis said "up" again and again
  // during a failover while every write to the state slot failed, and a WAIT there confirmed nothing of ours.
  // Like the cluster's own routing (enableOfflineQueue: false), a node still connecting fails at once.
  const stateNode = (): Redis => {
    const owner = cluster!.slots[STATE_SLOT]?.[0];
    const node = owner === undefined ? undefined : cluster!.nodes('master').find((n) => `${n.options.host}:${n.options.port}` === owner);
    if (!node) throw connectionError(`no connection to the primary holding the state (slot ${STATE_SLOT}${owner ? `, last known at ${owner}` : ''}): a failover is under way`);
    if (node.status !== 'ready' && node.status !== 'wait') throw connectionError(`the connection to the primary holding the state (${owner}) is ${node.status}`);
    return node;
  };

  const reportError = (err: unknown, from: 'state' | 'limiter' = 'state') => {
    const kind = errorKind(err);
    // a timeout on the server holding the state: on a Cluster the limiter's may be another node
    if (kind === 'timeout' && (from === 'state' || target.mode !== 'cluster' || nodeOf(err) === primaryFor(STATE_SLOT))) health.timedOutAt = Date.now();
    options.onCommandError?.(kind);
  };

  const justTimedOut = (): boolean => {
    const since = Date.now() - health.timedOutAt;
    return since >= 0 && since < TIMED_OUT_MS;
  };

  const replicas = replicaAcknowledgement({
    replicasToAck,
    ackTimeoutMs,
    commandTimeoutMs,
    // the primary the write went to: WAIT must go there too (the node owning the state slot on a Cluster)
    connection: () => (cluster ? stateNode() : client),
    node: () => primaryFor(STATE_SLOT) ?? 'the primary',
    reportError: (err) => reportError(err),
    onUnreplicatedWrite: () => options.onUnreplicatedWrite?.(),
    tell: (level, message, fields) => options.onTopologyEvent?.(level, message, fields),
  });
  const acknowledge = replicas.acknowledge;

  // A PING sent behind WAITs is answered only after them, and a WAIT holds its connection for the whole
  // ack timeout while a replica is missing (on a Cluster with one replica per primary, from every kill -9
  // until the old primary is back): with the command timeout alone (150 ms against 200) the PING timed
  // out on a Redis that was fine, and the view said "unreachable" and "back" around each write.
  //
  // Its deadline is checked after the event loop has read what was waiting (answeredWithin): a loop
  // held past the deadline (a burst of requests on a busy machine) ran ioredis's timer before reading
  // the PONG already there, and the view said "Redis unreachable" while Redis had answered in time.
  const ping = (connection: Redis): Promise<unknown> => {
    const command = new Command('ping', [], { replyEncoding: 'utf8' });
    const limitMs = commandTimeoutMs + ackTimeoutMs * replicas.waitsOn(connection);
    // ioredis's own timer only as a backstop well past ours (it runs before the turn's reads too): it
    // takes the command off ioredis's queue should Redis never answer
    command.setTimeout(10 * limitMs);
    return answeredWithin(connection.sendCommand(command) as Promise<unknown>, limitMs);
  };

  let refreshedAt = -Infinity;
  const pingState = async (): Promise<unknown> => {
    if (!cluster) return ping(client);
    try {
      return await ping(stateNode());
    } catch (err) {
      // while the stores send nothing but this PING, nothing else makes ioredis look at the slots again
      if (performance.now() - refreshedAt >= REFRESH_EVERY_MS) {
        refreshedAt = performance.now();
        cluster.refreshSlotsCache();
      }
      throw err;
    }
  };

  return {
    mode: target.mode,
    client,
    subscriber,
    health,
    primaryFor,
    primaries,
    refreshTopology: () => cluster?.refreshSlotsCache(),
    acknowledge,
    pingState,
    justTimedOut,
    sentinelsHeard: follower ? follower.listening : Promise.resolve(),
    auth: { username: target.username, password: target.password, db: target.db, tls: target.tls },
    reportError,
    options,
  };
}

/**
 * `promise`, or a timeout after `ms` — told once the event loop has also read what was waiting when the
 * timer fired (setImmediate runs after the poll phase), so an answer already received is not taken
 * for a timeout because timers run first in a late turn.
 */
function answeredWithin<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      setImmediate(() => {
        if (settled) return;
        settled = true;
        reject(Object.assign(new Error('Command timed out'), { code: 'REDIS_TIMEOUT' }));
      });
    }, ms);
    promise.then(
      (value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(err);
      },
    );
  });
}

function connectionError(message: string): Error {
  return Object.assign(new Error(message), { code: 'REDIS_CONNECTION' });
}

/** the node a limiter call timed out on (limiter-nodes.ts names it), through the errors wrapping it */
function nodeOf(err: unknown): string | undefined {
  for (let e = err as { node?: unknown; cause?: unknown } | null; e; e = e.cause as typeof e) if (typeof e.node === 'string') return e.node;
  return undefined;
}

/** what Portico asks of a sentinel (ioredis's discovery, the follower's events): an ACL user needs no more */
export const SENTINEL_ACL = '-@all +auth +hello +client|setname +ping +info +sentinel|get-master-addr-by-name +sentinel|sentinels +subscribe &+switch-master &+selected-slave &-failover-abort-slave-timeout';

/** A sentinel's refusal to talk to us, with what to change in the URL (never the password itself). */
function withSentinelHint(err: Error, target: RedisTarget): Error {
  if (!err.message.startsWith('All sentinels are unreachable')) return err;
  if (/NOAUTH/.test(err.message) && !target.sentinelPassword) return new Error(`${err.message} (the sentinels require a password: add ?sentinel_password=… to PORTICO_REDIS_URL)`);
  if (/WRONGPASS|invalid password/i.test(err.message)) return new Error(`${err.message} (the sentinels refused sentinel_username/sentinel_password in PORTICO_REDIS_URL)`);
  if (/NOPERM/.test(err.message)) return new Error(`${err.message} (the sentinels' user needs ${SENTINEL_ACL})`);
  return err;
}
