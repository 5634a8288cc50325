// How every store command reaches Redis: `call` waits out a connection lost a moment ago, PINGs a
// Redis that failed just before, and turns a failure into STATE_UNAVAILABLE; `write` is `call` followed
// by the wait for replicas (DESIGN §8). Made once per openRedisStores (redis.ts) and handed to each
// noun's store, so that all of them share one view of the connection and its failures.
import type { Redis } from 'ioredis';
import type { RedisConnections } from './redis-connect.ts';
import type { Guard } from './redis-cache.ts';
import { stateUnavailable } from './types.ts';
import { errorKind, type RedisErrorKind } from './redis-errors.ts';

const SUSPECT_MS = 2_000;
/** how long after losing its connection a command still waits for it to come back */
const RECONNECT_WAIT_MS = 1_000;
/** how long a command refused while its slot moves (-TRYAGAIN) is held and sent again, and how often */
const RESHARD_WAIT_MS = 5_000;
const RESHARD_PAUSE_MS = 50;
/**
 * what a slot being moved answers: ioredis goes from the old owner (-ASK) to the new one (-TRYAGAIN),
 * back to the owner in its slot map, which may be the new one (-MOVED), and gives up with the last
 */
const SLOT_MOVING = new Set<RedisErrorKind>(['tryagain', 'ask', 'moved']);

export interface RedisCommands {
  client: Redis;
  call: Guard;
  /** an acknowledged write: waits for replicas after it */
  write: Guard;
}

export function openRedisCommands(connections: RedisConnections, now: () => number = Date.now): RedisCommands {
  const { client, health } = connections;
  // A connection lost a moment ago is most often being made again already (a failover announced by
  // the sentinels moves it, sentinel-switch.ts; a restarted server is back within moments). A command
  // in the first second of such a gap waits for the connection (within the command timeout) instead
  // of failing at once; in a longer outage, commands fail at once.
  let lostAt: number | null = null;
  client.on('close', () => void (lostAt ??= now()));
  client.on('ready', () => void (lostAt = null));
  const reconnecting = async (): Promise<void> => {
    if (client.status === 'ready' || lostAt === null) return;
    const left = RECONNECT_WAIT_MS - (now() - lostAt);
    if (left > 0) await connected(client, Math.min(left, connections.options.commandTimeoutMs));
  };
  // After a failure, a command is preceded by a PING to the state's server (on a Cluster a plain PING
  // went to any node, and the write then into the frozen one) until Redis answers again: a frozen Redis
  // (SIGSTOP, a stalled network) still looks connected, and a write sent to it would be applied later
  // although its caller was told 503. Right after a timeout (this request's limiter call, most often)
  // Redis is not waited on again: the two waits made 2.0 s with a 1000 ms timeout. No failure to count.
  //
  // While a Cluster moves the state slot (redis-cli --cluster reshard), a write naming a key that is
  // on neither side in full is refused with -TRYAGAIN (or bounced between -ASK and -TRYAGAIN) — not
  // run — until the slot's every key is on its new owner (the state slot holds every state key: the
  // more certificates, the longer). Such a command is held and sent again every RESHARD_PAUSE_MS,
  // for up to RESHARD_WAIT_MS, instead of answering 503 at once; a longer move is answered 503.
  const call = async <T>(run: () => Promise<T>): Promise<T> => {
    if (connections.justTimedOut()) throw stateUnavailable(new Error('Redis did not answer a command in time a moment ago; not waiting on it again'));
    const since = now();
    for (let held = false; ; held = true) {
      try {
        await reconnecting();
        if (now() - health.failedAt < SUSPECT_MS) await connections.pingState();
        return await run();
      } catch (err) {
        // ioredis follows -ASK and -MOVED and sends -TRYAGAIN again a few times itself, then gives up
        // with the last of them: none of these ran the command
        const moving = SLOT_MOVING.has(errorKind(err));
        // counted once per command held, however many times it is sent again
        if (!moving || !held) connections.reportError(err);
        if (moving && now() - since < RESHARD_WAIT_MS) {
          await new Promise((resolve) => setTimeout(resolve, RESHARD_PAUSE_MS));
          continue;
        }
        health.failedAt = now();
        // not connected: ioredis says only that the stream isn't writeable; the connection's own error
        // (refused, an untrusted certificate, a wrong password) is the reason worth reporting
        throw stateUnavailable(client.status !== 'ready' && health.connectionError ? health.connectionError : err);
      }
    }
  };
  // an acknowledged write waits for replicas (DESIGN §8), on the connection that made it; one made
  // while a Sentinel failover began is not acknowledged (its outcome is unknown: 503)
  const write = async <T>(run: () => Promise<T>): Promise<T> => {
    // taken as the write is sent: one that waited for the connection to come back (on the new
    // primary) is not refused for the failover it waited out
    let mark = 0;
    const result = await call(() => {
      mark = connections.writeMark();
      return run();
    });
    try {
      await connections.acknowledge(mark);
    } catch (err) {
      throw stateUnavailable(err);
    }
    return result;
  };
  return { client, call, write };
}

/** Resolves when `promise` settles or after `ms`, whichever comes first. */
export function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([promise, new Promise((resolve) => (timer = setTimeout(resolve, ms)))]).then(() => clearTimeout(timer));
}

// the client's next 'ready', one listener however many commands wait for it: a listener per waiting
// command passed Node's limit of 10 in a failover under traffic (MaxListenersExceededWarning)
const nextReady = new WeakMap<Redis, Promise<void>>();

/** Resolves once the client is ready, or after `ms` (its next command then reports what is wrong). */
export function connected(client: Redis, ms: number): Promise<void> {
  if (client.status === 'ready') return Promise.resolve();
  let ready = nextReady.get(client);
  if (ready === undefined) {
    ready = new Promise<void>((resolve) => client.once('ready', () => {
      nextReady.delete(client);
      resolve();
    }));
    nextReady.set(client, ready);
  }
  return within(ready, ms);
}
