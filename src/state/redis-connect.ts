// Connects to Redis in the topology PORTICO_REDIS_URL names (redis-url.ts), with the options of
// redis-options.ts. ioredis does the topology itself: for Sentinel it asks the sentinels for the primary
// and follows failovers (sentinel-switch.ts moves it at the sentinels' +switch-master notices); for
// Cluster it keeps the slot map, follows MOVED/ASK and re-subscribes pub/sub when a node goes away. On a
// Cluster every state key lives in one slot (cluster-state.ts).
import { Cluster, Redis } from 'ioredis';
import type { RedisMode, RedisTarget } from './redis-url.ts';
import { errorKind, withUrlHint, type RedisErrorKind } from './redis-errors.ts';
import { followSwitches, type TopologyEvents } from './sentinel-switch.ts';
import { replicaAcknowledgement } from './redis-replicas.ts';
import { STATE_SLOT, stateNode } from './cluster-state.ts';
import { clusterOptions, commonOptions, serverOptions } from './redis-options.ts';
import { pingWithin } from './redis-ping.ts';
import { withSentinelHint } from './sentinel-hint.ts';

export { CLUSTER_KEY_PREFIX } from './cluster-state.ts';
export { SENTINEL_ACL } from './sentinel-hint.ts';

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
   * On Sentinel it then rejects when a failover began since `mark` (writeMark() before the write; by
   * default when this is called): see sentinel-switch.ts.
   */
  acknowledge(mark?: number): Promise<void>;
  /** taken before a write, for acknowledge() */
  writeMark(): number;
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
  const common = commonOptions(target, commandTimeoutMs);
  const health: RedisConnections['health'] = { failedAt: -Infinity, timedOutAt: -Infinity };

  let client: Redis;
  let subscriber: Redis;
  // a failover announced by the sentinels moves both connections at once instead of at their next
  // failure, and keeps them off a primary the announcement replaced (sentinel-switch.ts)
  const follower = target.mode === 'sentinel' ? followSwitches(target, options.onTopologyEvent) : null;
  if (target.mode === 'cluster') {
    const make = (name: string, offline: boolean) => new Cluster(target.addresses, clusterOptions(common, name, offline)) as unknown as Redis;
    client = make('portico', false);
    subscriber = make('portico-sub', true);
  } else {
    const base = serverOptions(target, common, commandTimeoutMs, follower?.Connector);
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
    connection: () => (cluster ? stateNode(cluster) : client),
    node: () => primaryFor(STATE_SLOT) ?? 'the primary',
    reportError: (err) => reportError(err),
    onUnreplicatedWrite: () => options.onUnreplicatedWrite?.(),
    tell: (level, message, fields) => options.onTopologyEvent?.(level, message, fields),
  });
  const writeMark = (): number => follower?.failovers() ?? 0;
  const acknowledge = async (mark = writeMark()): Promise<void> => {
    await replicas.acknowledge();
    if (follower && !(await follower.noFailoverSince(mark, commandTimeoutMs))) {
      throw new Error('a Sentinel failover began while this write was made: the replica that confirmed it may not be the one promoted');
    }
  };

  // A PING sent behind WAITs is answered only after them, and a WAIT holds its connection for the whole
  // ack timeout while a replica is missing (on a Cluster with one replica per primary, from every kill -9
  // until the old primary is back): with the command timeout alone (150 ms against 200) the PING timed
  // out on a Redis that was fine, and the view said "unreachable" and "back" around each write.
  const ping = (connection: Redis): Promise<unknown> => pingWithin(connection, commandTimeoutMs + ackTimeoutMs * replicas.waitsOn(connection));

  let refreshedAt = -Infinity;
  const pingState = async (): Promise<unknown> => {
    if (!cluster) return ping(client);
    try {
      return await ping(stateNode(cluster));
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
    writeMark,
    pingState,
    justTimedOut,
    sentinelsHeard: follower ? follower.listening : Promise.resolve(),
    auth: { username: target.username, password: target.password, db: target.db, tls: target.tls },
    reportError,
    options,
  };
}

/** the node a limiter call timed out on (limiter-nodes.ts names it), through the errors wrapping it */
function nodeOf(err: unknown): string | undefined {
  for (let e = err as { node?: unknown; cause?: unknown } | null; e; e = e.cause as typeof e) if (typeof e.node === 'string') return e.node;
  return undefined;
}
