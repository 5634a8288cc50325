// Acknowledged writes wait for replicas (DESIGN §8): `WAIT PORTICO_REDIS_REPLICAS_TO_ACK
// PORTICO_REDIS_REPLICA_ACK_TIMEOUT_MS` on the connection that wrote, after the write; a write not
// confirmed in time is counted (portico_redis_unreplicated_writes_total), never refused. The WAITs a
// connection has pending are counted too, since a command sent behind them is answered only after them
// (redis-connect.ts gives its PING that time).
import { Command, type Redis } from 'ioredis';
import type { TopologyEvents } from './sentinel-switch.ts';

/** writes are not confirmed by replicas: whether they are again is looked at, at most this often */
const REPLICAS_PROBE_EVERY_MS = 1_000;

export interface ReplicaAcknowledgementDeps {
  replicasToAck: number;
  ackTimeoutMs: number;
  commandTimeoutMs: number;
  /** the connection to the primary holding the state (throws while there is none) */
  connection(): Redis;
  /** that primary's host:port, for the log */
  node(): string;
  reportError(err: unknown): void;
  onUnreplicatedWrite(): void;
  tell: TopologyEvents;
}

export interface ReplicaAcknowledgement {
  /** after a write on the state's connection: WAIT for replicas, or count the write as unreplicated */
  acknowledge(): Promise<void>;
  /** WAITs sent on `connection` and not answered yet */
  waitsOn(connection: Redis): number;
}

export function replicaAcknowledgement(deps: ReplicaAcknowledgementDeps): ReplicaAcknowledgement {
  const { replicasToAck, ackTimeoutMs, commandTimeoutMs } = deps;
  // WAITs sent and not yet answered, per connection: Redis answers a connection's commands in order
  const waits = new Map<Redis, number>();

  // A WAIT that cannot succeed (the primary has fewer replicas than asked for: on a Cluster with one
  // replica per primary from a kill -9 until the old primary is back, on Sentinel while the replicas are
  // down) holds its connection for the whole ack timeout, and Redis answers a connection's commands in
  // order: every read and write behind it waited too, and timed out (150 ms against 200). A real Portico
  // on a Cluster whose state primary had lost its replica answered 28 of 3310 writes and 44 of 1284
  // reads in 6 s, the rest 503. So once a WAIT comes back short and the primary's INFO does not name
  // enough replicas online (online ones only lag: the next write waits again), writes to that primary
  // are counted as unreplicated without one, as a short WAIT counts them, until its INFO names them
  // again (a replica still syncing confirms nothing); then a WAIT decides. INFO that cannot be read (a
  // user without +info) leaves it to the WAIT, once a second at most.
  let unconfirmed: { node: string; probedAt: number } | null = null;

  // One WAIT at a time per connection, shared. Each write once sent its own, and Redis answers a
  // connection's WAITs one after the other: when the replica went away, the k-th of the writes made at
  // that moment waited k ack timeouts (two writers per instance: 445–545 ms against 200 on a Cluster
  // kill -9), and every command behind them too. A WAIT covers every write its connection made before
  // it, so a write joins the WAIT sent after it; one whose write went before the WAIT in flight waits
  // for that one's answer first — which, short or failed, tells it not to wait at all.
  let sequence = 0;
  const shared = new Map<Redis, { sentAfter: number; confirmed: Promise<number | null> }>();

  // A primary written to for the first time (at start, after a failover) has its INFO looked at before
  // any WAIT: a promoted replica has no replica of its own yet, and its first WAIT held the connection
  // for the whole ack timeout, so the commands behind it timed out, and for the next 250 ms the stores
  // refused to wait on Redis at all (a second burst of 503s right after writes had worked again, in 2 of
  // 4 Cluster kill -9 runs).
  let looked: { node: string; done: Promise<void> } | null = null;

  const acknowledge = async (): Promise<void> => {
    if (replicasToAck === 0) return;
    // every write this acknowledges was answered before now
    const writtenBy = ++sequence;
    for (;;) {
      const node = deps.node();
      if (looked?.node !== node) {
        const done = replicasOnline().then((online) => {
          if (!online) lacking(node, `it names fewer than ${replicasToAck} online`);
        });
        looked = { node, done };
      }
      await looked.done;
      if (unconfirmed?.node === node && !(await replicasBack(unconfirmed))) {
        deps.onUnreplicatedWrite();
        return;
      }
      let connection: Redis;
      try {
        connection = deps.connection();
      } catch (err) {
        deps.reportError(err);
        deps.onUnreplicatedWrite();
        return;
      }
      const inFlight = shared.get(connection);
      if (inFlight && inFlight.sentAfter < writtenBy) {
        // that WAIT failed (timed out: the primary frozen, or gone): one more would too, after as long
        // again (a write answered as a Cluster node froze took two command and two ack timeouts)
        if ((await inFlight.confirmed) === null) {
          deps.onUnreplicatedWrite();
          return;
        }
        continue;
      }
      const confirmed = await (inFlight ?? confirm(connection, node)).confirmed;
      if (confirmed === null || confirmed < replicasToAck) deps.onUnreplicatedWrite();
      return;
    }
  };

  /** one WAIT on `connection`, shared by the writes made before it; null when it failed */
  const confirm = (connection: Redis, node: string): { sentAfter: number; confirmed: Promise<number | null> } => {
    const entry = { sentAfter: ++sequence, confirmed: Promise.resolve<number | null>(null) };
    entry.confirmed = (async () => {
      try {
        return await settle(connection, node);
      } finally {
        if (shared.get(connection) === entry) shared.delete(connection);
      }
    })();
    shared.set(connection, entry);
    return entry;
  };

  const settle = async (connection: Redis, node: string): Promise<number | null> => {
    let confirmed: number | null = null;
    try {
      confirmed = Number(await wait(connection));
    } catch (err) {
      deps.reportError(err);
    }
    if (confirmed !== null && confirmed >= replicasToAck) {
      // also when the short ones were on a primary since replaced: the warning is answered either way
      if (unconfirmed) deps.tell('info', `writes to ${node} are confirmed by replicas again`, { node, replicas: confirmed });
      unconfirmed = null;
      return confirmed;
    }
    // an error says nothing of the replicas; a short answer does, unless they are online and only
    // lagging: then the next write waits again, as a write's durability asks
    if (confirmed === null || (unconfirmed?.node !== node && (await replicasOnline()))) return confirmed;
    lacking(node, `${confirmed} of ${replicasToAck} within ${ackTimeoutMs} ms`);
    return confirmed;
  };

  /** `node` lacks the replicas asked for: its writes are counted without a WAIT until it names them again */
  const lacking = (node: string, why: string): void => {
    if (unconfirmed?.node !== node) {
      const wanted = replicasToAck === 1 ? 'a replica' : `${replicasToAck} replicas`;
      deps.tell('warn', `writes to ${node} are not confirmed by replicas (${why}): they are answered without waiting and counted in portico_redis_unreplicated_writes_total until it names ${wanted} online again`, { node, replicasToAck });
    }
    unconfirmed = { node, probedAt: performance.now() };
  };

  /** whether a WAIT may succeed on the primary again (looked at once a second at most) */
  const replicasBack = async (state: { probedAt: number }): Promise<boolean> => {
    if (performance.now() - state.probedAt < REPLICAS_PROBE_EVERY_MS) return false;
    state.probedAt = performance.now();
    return replicasOnline();
  };

  /** the primary's INFO names enough replicas online, or cannot be read (then a WAIT decides) */
  const replicasOnline = async (): Promise<boolean> => {
    try {
      const connection = deps.connection();
      const command = new Command('info', ['replication'], { replyEncoding: 'utf8' });
      command.setTimeout(commandTimeoutMs + ackTimeoutMs * (waits.get(connection) ?? 0));
      const info = String(await connection.sendCommand(command));
      return (info.match(/^slave\d+:.*\bstate=online\b/gm)?.length ?? 0) >= replicasToAck;
    } catch {
      return true;
    }
  };

  const wait = async (connection: Redis): Promise<unknown> => {
    const command = new Command('wait', [replicasToAck, ackTimeoutMs], { replyEncoding: 'utf8' });
    // WAIT blocks up to its own timeout: it alone may outlast the command timeout (a timeout set
    // first is the one ioredis keeps)
    command.setTimeout(commandTimeoutMs + ackTimeoutMs);
    waits.set(connection, (waits.get(connection) ?? 0) + 1);
    try {
      return await connection.sendCommand(command);
    } finally {
      const left = waits.get(connection)! - 1;
      if (left === 0) waits.delete(connection);
      else waits.set(connection, left);
    }
  };

  return { acknowledge, waitsOn: (connection) => waits.get(connection) ?? 0 };
}
