// Following a Sentinel failover as soon as it is announced, once, and never writing to the old primary.
//
// Each sentinel publishes +switch-master when it learns of a failover, and they learn at different
// moments, up to seconds apart. ioredis's own detector (its `failoverDetector` option) reconnects at
// every one of those announcements: a connection already moved to the new primary by the first one, or
// by its own lost connection, was dropped and made again for each later sentinel, and writes made in
// each of those gaps answered 503 after the failover was over (seen in 2 of 3 kill -9 rounds).
//
// This listens to the same announcements and asks ioredis to reconnect a connection only when it is
// ready on another server than the announced primary. A connection waiting out its reconnect backoff
// (lost with the old primary) tries at once instead: by then the backoff is up to a second, and the
// announcement says the sentinels have a primary to name. Finding the primary stays with ioredis: a
// reconnect asks the sentinels, as its own detector's does.
//
// A failover can also send writes where they are lost. In a planned switchover (SENTINEL FAILOVER) the
// old primary stays up and a primary: the chosen replica is promoted, then the other replicas follow it,
// then the sentinels announce it, and only some seconds later (about 8) do they make the old primary a
// replica, which drops everything written to it meanwhile. Writes there were acknowledged, since the
// replica not promoted still confirmed them (WAIT), and lost: 7–10 categories in three of four
// switchovers in a row, and acknowledged writes in every switchover of sentinel-switch.test.ts. And a
// reconnect asks one sentinel: one that has not learned of the failover yet names the old primary.
// So:
// - at +selected-slave (the failover's leader has chosen the replica, and promotes it about 100 ms
//   later) the primary it replaces is fenced: connections on it are dropped, and it is not connected
//   to again for FENCE_MS, or until the new primary is announced or the promotion is aborted; writes
//   answer 503 meanwhile (about a second: the promotion);
// - for ANNOUNCED_MS after +switch-master only the announced primary is used: a sentinel naming another
//   is passed over (the connector below asks the next one), and a connection that becomes ready on
//   another server (it asked before the news came) is made again.
// Only the failover's leader publishes +selected-slave, so every sentinel is listened to: those in the
// URL, and the others they know (SENTINEL SENTINELS, asked again every REDISCOVER_MS and whenever a
// listener connects): a sentinel that was down at the start, or one added later, may lead the next
// failover.
//
// An announcement names the new primary as the sentinels know it (`<name> <old ip> <old port> <new ip>
// <new port>`): an address, or with `announce-hostnames` (Kubernetes charts set it) a hostname, which is
// looked up and compared by its addresses, as a connection's peer is one. A connection whose peer cannot
// be matched (the lookup failed, another address for the same server) is reconnected: one gap too many,
// never a missed failover.
import { Redis, SentinelConnector, type RedisOptions } from 'ioredis';
import type { RedisAddress, RedisTarget } from './redis-url.ts';
import { addressesOf, announcedPrimary, otherSentinels, selectedFrom } from './sentinel-events.ts';

const SWITCHED = '+switch-master';
const SELECTED = '+selected-slave';
const ABORTED = '-failover-abort-slave-timeout';
/** how long an announced primary is the only one used (the sentinels agree well within it) */
export const ANNOUNCED_MS = 30_000;
/** how long a primary being failed over is not used without the failover's end being announced */
export const FENCE_MS = 15_000;
/** how often the sentinels are asked again for the others they know */
export const REDISCOVER_MS = 10_000;
/** how long the start waits for every sentinel to be listened to (redis.ts), and the start's line with it */
export const SENTINELS_WAIT_MS = 2_000;
/**
 * Emitted on every followed client with the announced primary ("host:port") at +switch-master, and with
 * null at +selected-slave (a failover has begun): the limiter's own connections (redis-limiter.ts) go
 * there at once instead of waiting for the client to be ready on it.
 */
export const PRIMARY_ANNOUNCED = 'portico:primary-announced';

type Target = Pick<RedisTarget, 'addresses' | 'name' | 'tls' | 'sentinelUsername' | 'sentinelPassword'>;
/** what ioredis's `Connector` option takes */
type ConnectorClass = NonNullable<RedisOptions['Connector']>;

/** a log line's level, message and fields */
export type TopologyEvents = (level: 'info' | 'warn', message: string, fields: Record<string, unknown>) => void;

export interface SwitchFollower {
  /** ioredis's Sentinel connector, passing over a sentinel that names a primary this follower refuses */
  readonly Connector: ConnectorClass;
  /** keeps each of `clients` on the announced primary and off one being failed over */
  follow(clients: Redis[]): void;
  /** ioredis's "All sentinels are unreachable", said as what it is: a failover under way, or the
   * sentinels tried and what they answered */
  explain(err: Error): Error;
  /** resolves once every sentinel (the URL's and those they know at the start) is listened to: from
   * then on no failover's start is missed. Never, while one of them cannot be reached: wait for it
   * bounded. Sentinels named later are listened to as they come, without holding it */
  readonly listening: Promise<void>;
  close(): void;
}

/** a server named by the sentinels, since `at`; `found`: its addresses once looked up */
interface Named {
  server: RedisAddress;
  at: number;
  addresses: Promise<string[]>;
  found?: string[];
}

function named(server: RedisAddress, at: number): Named {
  const out: Named = { server, at, addresses: addressesOf(server.host) };
  void out.addresses.then((found) => (out.found = found));
  return out;
}

/** runs `check` with `name`'s addresses: at once when they are known (before anything is sent on a new connection) */
function withAddresses(name: Named, check: (found: string[]) => void): void {
  if (name.found) check(name.found);
  else void name.addresses.then(check);
}

/**
 * Subscribes to the failover events of every sentinel of `target` (a Sentinel URL's); `now` is for tests.
 */
export function followSwitches(target: Target, tell: TopologyEvents = () => undefined, now: () => number = Date.now): SwitchFollower {
  const name = target.name!;
  const clients: Redis[] = [];
  // the newest primary announced, and the primary a failover has started to replace
  let announced: Named | null = null;
  let fenced: Named | null = null;
  const recent = (what: Named | null, ms: number) => (what !== null && now() - what.at < ms ? what : null);

  const onSwitched = (primary: RedisAddress) => {
    // every sentinel announces it: told once
    const current = recent(announced, ANNOUNCED_MS);
    if (fenced !== null || current === null || current.server.host !== primary.host || current.server.port !== primary.port) {
      tell('info', 'Sentinel failover: following the new primary', { primary: `${primary.host}:${primary.port}` });
    }
    const newest = named(primary, now());
    announced = newest;
    fenced = null;
    // waiting out its backoff after a lost connection: try now, the sentinels name the new primary
    for (const client of clients) if (client.status === 'reconnecting') client.connect().catch(() => undefined);
    withAddresses(newest, (found) => {
      for (const client of clients) if (peerIs(client, found, primary.port) === false) client.disconnect(true);
    });
    for (const client of clients) client.emit(PRIMARY_ANNOUNCED, `${primary.host}:${primary.port}`);
  };
  const onSelected = (old: RedisAddress) => {
    tell('info', 'Sentinel failover under way: the primary being replaced is not used (writes answer 503 until the new one is announced)', { primary: `${old.host}:${old.port}` });
    const fence = named(old, now());
    fenced = fence;
    // the primary announced before is the one being replaced: whichever the sentinels name next but it will do
    announced = null;
    withAddresses(fence, (found) => {
      for (const client of clients) if (peerIs(client, found, old.port) === true) client.disconnect(true);
    });
    for (const client of clients) client.emit(PRIMARY_ANNOUNCED, null);
  };

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
        if (primary !== null) onSwitched(primary);
      } else if (channel === SELECTED) {
        const old = selectedFrom(message, name);
        if (old !== null) onSelected(old);
      } else if (channel === ABORTED && message.split(' ')[1] === name) fenced = null;
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
  const rediscovery = setInterval(() => void discover(), REDISCOVER_MS);
  rediscovery.unref();
  for (const sentinel of target.addresses) listen(sentinel);

  /** a sentinel's answer is usable: not the primary being failed over, and the newest announced one if any */
  const agrees = async (found: RedisAddress): Promise<boolean> => {
    const fence = recent(fenced, FENCE_MS);
    if (fence !== null && (await same(found, fence))) return false;
    const newest = recent(announced, ANNOUNCED_MS);
    return newest === null || (await same(found, newest));
  };

  return {
    Connector: agreeingConnector(agrees),
    listening,
    follow(moved) {
      for (const client of moved) {
        clients.push(client);
        // it asked a sentinel before the news came, and that one named the old primary
        client.on('ready', () => {
          const fence = recent(fenced, FENCE_MS);
          const newest = recent(announced, ANNOUNCED_MS);
          if (fence) withAddresses(fence, (found) => peerIs(client, found, fence.server.port) === true && client.disconnect(true));
          if (newest) withAddresses(newest, (found) => peerIs(client, found, newest.server.port) === false && client.disconnect(true));
        });
      }
    },
    explain(err) {
      if (!err.message.startsWith('All sentinels are unreachable')) return err;
      const fence = recent(fenced, FENCE_MS);
      const newest = recent(announced, ANNOUNCED_MS);
      if (fence) return new Error(`a Sentinel failover is under way: ${fence.server.host}:${fence.server.port} is being replaced, and the new primary is not announced yet`);
      if (newest) return new Error(`the sentinels asked do not name the announced primary ${newest.server.host}:${newest.server.port} yet`);
      // ioredis's own words name no sentinel, and promise a retry ("Retrying from scratch after 650ms")
      // that a start which stops on them never makes. Each sentinel's own error is its listener's
      // (ioredis's last one is most often "Connection is closed.")
      const last = /Last error: (.*)$/s.exec(err.message)?.[1] ?? null;
      const tried = [...listeners.keys()];
      if (last !== null && /NOAUTH|WRONGPASS|NOPERM|invalid password/i.test(last)) return new Error(`the sentinels (${tried.join(', ')}) refuse Portico: ${last}`);
      const unreached = tried.filter((id) => failures.has(id)).map((id) => `${id} (${failures.get(id)!.replace(` ${id}`, '')})`);
      const answered = tried.filter((id) => !failures.has(id));
      if (answered.length === 0) return new Error(`no sentinel could be reached: ${unreached.join(', ')}`);
      // reached, and none named a primary: a wrong name in the URL, most often
      const told = `${answered.join(', ')}: ${last ?? 'no address'}`;
      return new Error(`no sentinel named the primary "${name}": ${unreached.length > 0 ? `${unreached.join(', ')} not reached; ${told}` : told}`);
    },
    close() {
      closed = true;
      clearInterval(rediscovery);
      for (const listener of listeners.values()) listener.disconnect();
    },
  };
}

/** Resolves when `promise` settles or after `ms`, whichever comes first. */
function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([promise, new Promise((resolve) => (timer = setTimeout(resolve, ms)))]).then(() => clearTimeout(timer));
}

/** the same server: the same name and port, or one of the same addresses */
async function same(found: RedisAddress, name: Named): Promise<boolean> {
  if (found.port !== name.server.port) return false;
  if (found.host === name.server.host) return true;
  const [theirs, ours] = await Promise.all([addressesOf(found.host), name.addresses]);
  return theirs.some((address) => ours.includes(address));
}

/**
 * ioredis's SentinelConnector, asking the next sentinel when one names a primary `agrees` refuses (as
 * it does when one does not answer). It wraps the connector's `resolveMaster` (ioredis 5 and 6): should
 * that method go, the connector is ioredis's own, and the check on `ready` above still moves a connection.
 */
function agreeingConnector(agrees: (found: RedisAddress) => Promise<boolean>): ConnectorClass {
  type Resolve = (this: SentinelConnector, client: Redis) => Promise<RedisAddress | null>;
  const resolveMaster = (SentinelConnector.prototype as unknown as { resolveMaster?: Resolve }).resolveMaster;
  if (typeof resolveMaster !== 'function') return SentinelConnector as unknown as ConnectorClass;
  class AgreeingConnector extends SentinelConnector {}
  const resolve: Resolve = async function (client) {
    const found = await resolveMaster.call(this, client);
    return found !== null && (await agrees(found)) ? found : null;
  };
  Object.defineProperty(AgreeingConnector.prototype, 'resolveMaster', { value: resolve });
  return AgreeingConnector as unknown as ConnectorClass;
}

/** whether `client` is ready on `port` at one of `addresses`; null while it is not ready (being made, it asks the sentinels) */
function peerIs(client: Redis, addresses: string[], port: number): boolean | null {
  if (client.status !== 'ready') return null;
  const stream = (client as unknown as { stream?: { remoteAddress?: string; remotePort?: number } }).stream;
  const peer = stream?.remoteAddress;
  return stream?.remotePort === port && peer !== undefined && addresses.some((address) => peer === address || peer === `::ffff:${address}`);
}
