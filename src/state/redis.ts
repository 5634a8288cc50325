// Redis backend: shared by every instance, on one server, Sentinel or Cluster (redis-connect.ts).
// openRedisStores puts the stores together and holds the start; each noun's store has its own file
// (redis-accounts.ts, redis-keys.ts, redis-categories.ts, redis-domains.ts, redis-schedule.ts). Hot
// reads (key lookups, accounts, category lists) go through a small in-process cache (redis-cache.ts),
// so an authenticated /v1 read makes no Redis round trip besides the limiter's; a change publishes on
// `portico:invalidate` and every instance reads its copy again at its next use (a changed key is
// dropped at once), every cache is read again when the subscriber reconnects (redis-notices.ts), and
// entries live at most 60 s. Acknowledged writes wait for replicas (`write`, DESIGN §8).
// When Redis cannot be reached, reads fall back to the last data this instance saw (DESIGN §4,
// `onRedisDown: local`); writes reject with code STATE_UNAVAILABLE (redis-commands.ts).
import type { Cluster } from 'ioredis';
import { connectRedis as connectTopology, type RedisConnectOptions, type RedisConnections } from './redis-connect.ts';
import { parseRedisUrl } from './redis-url.ts';
import { clusterStartError, listenToNodes } from './cluster-start-errors.ts';
import { stateUnavailable, type Account, type ApiKey, type Category, type Environment, type Stores } from './types.ts';
import { openRedisDomainStores } from './redis-domains.ts';
import { openRedisSchedule } from './redis-schedule.ts';
import { Cache } from './redis-cache.ts';
import { connected, openRedisCommands, within } from './redis-commands.ts';
import { CHANNEL, followNotices } from './redis-notices.ts';
import { openRedisAccounts } from './redis-accounts.ts';
import { openRedisKeys } from './redis-keys.ts';
import { openRedisCategories } from './redis-categories.ts';
import { refusalIn, refusedRights, rightsError } from './redis-rights.ts';
import { SENTINELS_WAIT_MS } from './sentinel-switch.ts';
import { settledByConfiguration } from './redis-errors.ts';
import { readAtStart, START_READ_WAIT_MS } from './start-reads.ts';

// for the certificates' stores, which share the command path (main.ts)
export { openRedisCommands };

// the start's wait for Redis to connect; its first reads are given as long again (start-reads.ts)
const READY_WAIT_MS = START_READ_WAIT_MS;

export type { RedisConnections } from './redis-connect.ts';

/** Connects in the topology `url` names (redis-url.ts); a number is the command timeout alone. */
export function connectRedis(url: string, options: number | RedisConnectOptions): RedisConnections {
  const target = parseRedisUrl(url);
  if (target instanceof Error) throw new Error(`PORTICO_REDIS_URL ${target.message}`);
  return connectTopology(target, typeof options === 'number' ? { commandTimeoutMs: options } : options);
}

/** `commands`: the command path, when other stores on these connections share it (the certificates') */
export async function openRedisStores(connections: RedisConnections, now: () => number = Date.now, commands = openRedisCommands(connections, now)): Promise<Stores> {
  const { client, subscriber, health } = connections;
  const { call, write } = commands;
  const { projects, domains, routeIndex } = openRedisDomainStores(client, call, write);
  const keyCache = new Cache<string, ApiKey | null>(call, now);
  const categoryLists = new Cache<Environment, Category[]>(call, now);
  const accountCache = new Cache<string, Account | null>(call, now);
  const accounts = openRedisAccounts(commands, accountCache);
  const keys = openRedisKeys(commands, keyCache);
  const categories = openRedisCategories(commands, categoryLists);
  const events = followNotices({ client, subscriber, call, keyCache, findByHash: keys.findByHash, categoryLists, accountCache, routeIndex });

  // subscribed first, so a change made while the index loads is not missed; the client must be
  // connected (it queues nothing offline), or the load fails at once while Redis is merely slow to answer.
  // Both waits are bounded: the subscription stays queued (and ioredis resubscribes after every
  // reconnect), but a Redis that cannot be reached — sentinels that refuse us among them — must stop the
  // start with its error, not hold it silently
  // On Sentinel, every sentinel is listened to first: only the failover's leader tells that it has
  // begun, and writes acknowledged on the old primary after that are lost (sentinel-switch.ts). A
  // sentinel that cannot be reached holds the start SENTINELS_WAIT_MS at most.
  // A Redis user short of a right Portico needs stops the start at once, with one error naming the user,
  // what Redis refused and the rule (redis-rights.ts): every right the check finds missing, else the
  // NOPERM of the subscription, of the connection (a Cluster's slot map: CLUSTER SLOTS; that one ends
  // the wait at once) or of the first commands. Not a Sentinel connection's error: a refusal there is
  // the sentinels' user (sentinel-hint.ts's SENTINEL_ACL names what that one needs).
  const refused: { refusal: string | null; endWait: () => void } = { refusal: null, endWait: () => undefined };
  const waitEnded = new Promise<void>((resolve) => (refused.endWait = resolve));
  const onRefusal = (err: unknown) => void (refused.refusal ??= refusalIn(err));
  const onConnectionRefusal = (err: unknown) => {
    onRefusal(err);
    // wrong or missing credentials, a certificate that cannot be verified: asking again gets the same
    // answer, the start stops at once with it
    if (refused.refusal !== null || settledByConfiguration(err)) refused.endWait();
  };
  if (connections.mode !== 'sentinel') client.on('error', onConnectionRefusal);
  const nodeErrors = connections.mode === 'cluster' ? listenToNodes(client) : null;
  await Promise.race([
    waitEnded,
    Promise.all([
      within(subscriber.subscribe(CHANNEL).catch(onRefusal), READY_WAIT_MS),
      connected(client, READY_WAIT_MS),
      within(connections.sentinelsHeard, SENTINELS_WAIT_MS),
    ]),
  ]);
  client.off('error', onConnectionRefusal);
  nodeErrors?.stop();
  const giveUp = (err: Error): Error => {
    subscriber.disconnect();
    client.disconnect();
    return err;
  };
  const stopForRights = (refusal: string | string[]) => giveUp(rightsError(connections.auth.username, refusal));
  if (client.status === 'ready') {
    const missing = await refusedRights(client, connections.mode).catch((err: unknown) => (onRefusal(err), []));
    if (missing.length > 0) throw stopForRights(missing);
  }
  if (refused.refusal !== null) throw stopForRights(refused.refusal);
  // ioredis selects the URL's database on connecting and carries on in database 0 when the server
  // refuses it (an index past `databases`): the state would go where nobody asked
  if (client.status === 'ready' && connections.mode !== 'cluster' && connections.auth.db !== 0) {
    const db = connections.auth.db;
    const refusal = await client.select(db).then(() => null, (err: unknown) => err as Error);
    // no `cause`: its words are in the message already, and the log's error line joined them twice
    if (refusal !== null) throw giveUp(stateUnavailable(new Error(`PORTICO_REDIS_URL names database ${db}, which the server refuses (${refusal.message}); the start stops`)));
  }
  if (client.status !== 'ready' && nodeErrors) {
    // ioredis's "Failed to refresh slots cache." alone says less than the guess below
    const told = await clusterStartError(client as unknown as Cluster, nodeErrors.errors);
    health.connectionError = told ?? (health.connectionError?.name === 'ClusterAllFailedError' ? undefined : health.connectionError);
  }
  // still connecting and nothing said why: a TLS handshake that never ends (rediss:// to a port that
  // speaks plain RESP waits for bytes that never come), or a server that accepts and stays silent
  if (client.status !== 'ready' && !health.connectionError) {
    health.connectionError = new Error(`no connection to Redis within ${READY_WAIT_MS / 1000} s${connections.auth.tls ? ': the TLS handshake did not finish (rediss:// needs a port that speaks TLS)' : ': the server accepted the connection but did not answer'}`);
  }
  // nothing to serve from: said so (ioredis's own words may promise a retry, "Retrying from scratch
  // after 650ms", that a stopped start never makes)
  if (client.status !== 'ready' && health.connectionError) {
    const reason = health.connectionError;
    // no `cause`, as above ("…ECONNREFUSED 127.0.0.1:1; the start stops: connect ECONNREFUSED 127.0.0.1:1")
    throw giveUp(stateUnavailable(new Error(`${reason.message}; the start stops`)));
  }
  // a read that timed out on a Redis slow for a moment is tried again within the start's wait (start-reads.ts)
  const retrying = (err: Error) => connections.options.onTopologyEvent?.('warn', 'the first read of the domain index failed; trying again', { err: err.message });
  await readAtStart(() => routeIndex.load(), START_READ_WAIT_MS, retrying).catch((err: unknown) => {
    // a command refused (a server the check above cannot ask: Redis before 7.0)
    const refusal = client.status === 'ready' ? refusalIn(err) : null;
    throw refusal === null ? err : stopForRights(refusal);
  });

  return {
    accounts,
    keys,
    categories,
    projects,
    domains,
    schedule: openRedisSchedule(client, call, write),
    events,
    health: async () => {
      try {
        await connections.pingState();
        return 'ok';
      } catch {
        return 'down';
      }
    },
    close: async () => {
      routeIndex.close();
      subscriber.disconnect();
      client.disconnect();
    },
  };
}
