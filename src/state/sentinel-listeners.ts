// Every sentinel's failover events. Only the failover's leader publishes +selected-slave, so every
// sentinel is listened to: those in the URL, and the others they know (SENTINEL SENTINELS, asked again
// every REDISCOVER_MS and whenever a listener connects): a sentinel that was down at the start, or one
// added later, may lead the next failover.
import { Redis } from 'ioredis';
import type { RedisAddress, RedisTarget } from './redis-url.ts';
import { announcedPrimary, otherSentinels, selectedFrom } from './sentinel-events.ts';
import { within } from './redis-commands.ts';

const SWITCHED = '+switch-master';
const SELECTED = '+selected-slave';
const ABORTED = '-failover-abort-slave-timeout';
/** how often the sentinels are asked again for the others they know */
export const REDISCOVER_MS = 10_000;
/** how long the start waits for every sentinel to be listened to (redis.ts), and the start's line with it */
export const SENTINELS_WAIT_MS = 2_000;

export type Target = Pick<RedisTarget, 'addresses' | 'name' | 'tls' | 'sentinelUsername' | 'sentinelPassword'>;

/** a log line's level, message and fields */
export type TopologyEvents = (level: 'info' | 'warn', message: string, fields: Record<string, unknown>) => void;

export interface FailoverEvents {
  /** +switch-master, with the new primary */
  switched(primary: RedisAddress): void;
  /** +selected-slave, with the primary the failover replaces */
  selected(old: RedisAddress): void;
  /** -failover-abort-slave-timeout: the promotion is given up */
  aborted(): void;
}

export interface SentinelListeners {
  /** see SwitchFollower.listening (sentinel-switch.ts) */
  readonly listening: Promise<void>;
  /** every sentinel listened to or being tried, as host:port */
  tried(): string[];
  /** each sentinel's last error, until it is ready again */
  readonly failures: ReadonlyMap<string, string>;
  /**
   * Resolves once every event each sentinel listened to had sent before this call is heard: a PING on
   * each listener (answered in order with what it published before), sent after the call; a sentinel
   * that does not answer within `ms`, is not connected, or still owes an earlier PING, is not waited for.
   */
  caughtUp(ms: number): Promise<void>;
  close(): void;
}

/** Subscribes to the failover events of every sentinel of `target` (a Sentinel URL's), told to `on`. */
export function listenToSentinels(target: Target, tell: TopologyEvents, on: FailoverEvents): SentinelListeners {
  const name = target.name!;
  // every sentinel's events: the URL names some (or one name in front of all), the others are asked
  // for, since only the failover's leader tells +selected-slave
  const listeners = new Map<string, Redis>();
  const subscriptions: Array<Promise<unknown>> = [];
  // those listened to; their last error (for `explain`); those refused (told already); those the start
  // line could not name (told once more when they are listened to)
  const heard = new Set<string>();
  const failures = new Map<string, string>();
  const warned = new Set<string>();
  const away = new Set<string>();
  let heardAll!: () => void;
  const listening = new Promise<void>((resolve) => (heardAll = resolve));
  let closed = false;
  // the first answer tells which sentinels the start waits for; later ones are listened to as named
  let discovered = false;
  const connection = (sentinel: RedisAddress) => ({
    host: sentinel.host,
    port: sentinel.port,
    tls: target.tls ? {} : undefined,
    username: target.sentinelUsername,
    password: target.sentinelPassword,
    connectionName: 'portico-switch',
  });
  const listen = (sentinel: RedisAddress) => {
    const id = `${sentinel.host}:${sentinel.port}`;
    if (closed || listeners.has(id)) return;
    const named = discovered;
    const listener = new Redis({
      ...connection(sentinel),
      // it only subscribes: keep trying, never fail a command
      enableOfflineQueue: true,
      maxRetriesPerRequest: null,
      retryStrategy: (attempt) => Math.min(100 * attempt, 2000),
      lazyConnect: false,
    });
    listeners.set(id, listener);
    // a sentinel that is away is one announcement fewer; the others (and the lost connection) still
    // tell. One that refuses us (credentials, ACL) is said once until it is heard again
    // (the ACL user needs the channels: `&+switch-master &+selected-slave &-failover-abort-slave-timeout`)
    let refused = false;
    const refuse = (err: Error) => {
      failures.set(id, err.message);
      if (refused || !/NOAUTH|WRONGPASS|NOPERM|invalid password/i.test(err.message)) return;
      refused = true;
      warned.add(id);
      tell('warn', 'cannot hear this sentinel\'s failover events: a failover it leads may be followed late', { sentinel: id, err: err.message });
    };
    listener.on('error', refuse);
    listener.on('ready', () => {
      refused = false;
      failures.delete(id);
      void discover();
    });
    // told once it is listened to: one that cannot be reached is not
    const subscribed = () => {
      heard.add(id);
      if (named) tell('info', 'listening to a sentinel newly named by the others', { sentinel: id });
      else if (away.delete(id)) tell('info', 'listening to a sentinel that could not be reached at the start', { sentinel: id });
    };
    subscriptions.push(listener.subscribe(SWITCHED, SELECTED, ABORTED).then(subscribed, refuse));
    listener.on('message', (channel: string, message: string) => {
      if (channel === SWITCHED) {
        const primary = announcedPrimary(message, name);
        if (primary !== null) on.switched(primary);
      } else if (channel === SELECTED) {
        const old = selectedFrom(message, name);
        if (old !== null) on.selected(old);
      } else if (channel === ABORTED && message.split(' ')[1] === name) on.aborted();
    });
  };
  /**
   * the other sentinels watching `name`, as the first one that answers knows them: at the start, at
   * every listener's connect and every REDISCOVER_MS, so one that was down at the start (passed over,
   * flagged s_down) or was added since is heard too. One that drops out of the answers is still
   * listened to: it may only be down for now (a restart, a partition), and its listener reconnects by
   * itself at most every 2 s, which costs little; `close()` ends them all.
   */
  let asking: Promise<void> | null = null;
  let askAgain = false;
  const discover = (): Promise<void> => {
    if (closed) return Promise.resolve();
    // one round at a time; a listener that connects meanwhile gets one more round, after it
    if (asking) {
      askAgain = true;
      return asking;
    }
    asking = ask().finally(() => {
      asking = null;
      if (askAgain) {
        askAgain = false;
        void discover();
      }
    });
    return asking;
  };
  const ask = async () => {
    for (const id of [...listeners.keys()]) {
      if (closed) return;
      const at = id.lastIndexOf(':');
      const asker = new Redis({ ...connection({ host: id.slice(0, at), port: Number(id.slice(at + 1)) }), lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 2000, commandTimeout: 2000 });
      asker.on('error', () => undefined);
      try {
        const others = otherSentinels(await asker.call('SENTINEL', 'SENTINELS', name));
        if (closed) return;
        const first = !discovered;
        for (const sentinel of others) listen(sentinel);
        if (first) {
          discovered = true;
          const known = [...listeners.keys()];
          void within(Promise.all(subscriptions), SENTINELS_WAIT_MS).then(() => tellStart(known));
          void Promise.all(subscriptions).then(() => heardAll());
        }
        return;
      } catch {
        // the next one, or none: those already found are still listened to
      } finally {
        asker.disconnect();
      }
    }
  };
  /** the start's line: the sentinels listened to by now, and a warning naming those that cannot be reached */
  const tellStart = (known: string[]) => {
    if (closed) return;
    tell('info', 'listening to the sentinels\' failover events', { sentinels: known.filter((id) => heard.has(id)) });
    const unreached = known.filter((id) => !heard.has(id) && !warned.has(id));
    for (const id of unreached) away.add(id);
    if (unreached.length === 0) return;
    const errors = Object.fromEntries(unreached.flatMap((id) => (failures.has(id) ? [[id, failures.get(id)]] : [])));
    tell('warn', 'sentinels not reached, their failover events not heard: a failover one of them leads may be followed late (each is tried again every 2 s)', { sentinels: unreached, errors });
  };
  // One round of PINGs at a time, shared: a caller that comes while one is out waits for the next,
  // since the one out may have been sent before what the caller needs heard happened.
  // A sentinel still owing the PING of an earlier round (frozen, a stalled link) is not sent another:
  // it is not waited for, and its unanswered PINGs do not pile up.
  let round: Promise<void> | null = null;
  let queued: Promise<void> | null = null;
  const owing = new Set<Redis>();
  const ping = (listener: Redis): Promise<unknown> => {
    owing.add(listener);
    return listener.ping().catch(() => undefined).finally(() => owing.delete(listener));
  };
  const pingAll = (ms: number): Promise<void> => {
    const ready = [...listeners].filter(([id, listener]) => heard.has(id) && listener.status === 'ready' && !owing.has(listener));
    return Promise.all(ready.map(([, listener]) => within(ping(listener), ms))).then(() => undefined);
  };
  const caughtUp = (ms: number): Promise<void> => {
    if (round === null) return (round = pingAll(ms).finally(() => (round = null)));
    return (queued ??= round.then(() => {
      queued = null;
      return caughtUp(ms);
    }));
  };
  const rediscovery = setInterval(() => void discover(), REDISCOVER_MS);
  rediscovery.unref();
  for (const sentinel of target.addresses) listen(sentinel);

  return {
    listening,
    failures,
    tried: () => [...listeners.keys()],
    caughtUp,
    close() {
      closed = true;
      clearInterval(rediscovery);
      for (const listener of listeners.values()) listener.disconnect();
    },
  };
}
