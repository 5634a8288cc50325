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
//   is passed over (the connector, sentinel-connector.ts, asks the next one), and a connection that
//   becomes ready on another server (it asked before the news came) is made again.
// Only the failover's leader publishes +selected-slave, so every sentinel is listened to
// (sentinel-listeners.ts).
//
// An announcement names the new primary as the sentinels know it (`<name> <old ip> <old port> <new ip>
// <new port>`): an address, or with `announce-hostnames` (Kubernetes charts set it) a hostname, which is
// looked up and compared by its addresses, as a connection's peer is one. A connection whose peer cannot
// be matched (the lookup failed, another address for the same server) is reconnected: one gap too many,
// never a missed failover.
import type { Redis } from 'ioredis';
import type { RedisAddress } from './redis-url.ts';
import { agreeingConnector, type ConnectorClass } from './sentinel-connector.ts';
import { listenToSentinels, type Target, type TopologyEvents } from './sentinel-listeners.ts';
import { named, peerIs, same, withAddresses, type Named } from './sentinel-named.ts';

export { REDISCOVER_MS, SENTINELS_WAIT_MS, type TopologyEvents } from './sentinel-listeners.ts';

/** how long an announced primary is the only one used (the sentinels agree well within it) */
export const ANNOUNCED_MS = 30_000;
/** how long a primary being failed over is not used without the failover's end being announced */
export const FENCE_MS = 15_000;
/**
 * Emitted on every followed client with the announced primary ("host:port") at +switch-master, and with
 * null at +selected-slave (a failover has begun): the limiter's own connections (redis-limiter.ts) go
 * there at once instead of waiting for the client to be ready on it.
 */
export const PRIMARY_ANNOUNCED = 'portico:primary-announced';

export interface SwitchFollower {
  /** ioredis's Sentinel connector, passing over a sentinel that names a primary this follower refuses */
  readonly Connector: ConnectorClass;
  /** keeps each of `clients` on the announced primary and off one being failed over */
  follow(clients: Redis[]): void;
  /** ioredis's "All sentinels are unreachable", said as what it is: a failover under way, or the
   * sentinels tried and what they answered */
  explain(err: Error): Error;
  /** how many failovers have begun (+selected-slave heard) so far: taken before a write */
  failovers(): number;
  /**
   * After a write confirmed by a replica: whether no failover began since `mark` (failovers() before
   * the write), once every sentinel's events up to now are heard (`ms` at most per sentinel). False:
   * the replica that confirmed it may not be the one promoted, and the write may be lost with the old
   * primary.
   */
  noFailoverSince(mark: number, ms: number): Promise<boolean>;
  /** resolves once every sentinel (the URL's and those they know at the start) is listened to: from
   * then on no failover's start is missed. Never, while one of them cannot be reached: wait for it
   * bounded. Sentinels named later are listened to as they come, without holding it */
  readonly listening: Promise<void>;
  close(): void;
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
  let begun = 0;
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
    begun++;
    // the primary announced before is the one being replaced: whichever the sentinels name next but it will do
    announced = null;
    withAddresses(fence, (found) => {
      for (const client of clients) if (peerIs(client, found, old.port) === true) client.disconnect(true);
    });
    for (const client of clients) client.emit(PRIMARY_ANNOUNCED, null);
  };
  const sentinels = listenToSentinels(target, tell, { switched: onSwitched, selected: onSelected, aborted: () => void (fenced = null) });

  /** a sentinel's answer is usable: not the primary being failed over, and the newest announced one if any */
  const agrees = async (found: RedisAddress): Promise<boolean> => {
    const fence = recent(fenced, FENCE_MS);
    if (fence !== null && (await same(found, fence))) return false;
    const newest = recent(announced, ANNOUNCED_MS);
    return newest === null || (await same(found, newest));
  };

  return {
    Connector: agreeingConnector(agrees),
    listening: sentinels.listening,
    failovers: () => begun,
    async noFailoverSince(mark, ms) {
      if (begun !== mark) return false;
      await sentinels.caughtUp(ms);
      return begun === mark;
    },
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
      const tried = sentinels.tried();
      const failures = sentinels.failures;
      if (last !== null && /NOAUTH|WRONGPASS|NOPERM|invalid password/i.test(last)) return new Error(`the sentinels (${tried.join(', ')}) refuse Portico: ${last}`);
      const unreached = tried.filter((id) => failures.has(id)).map((id) => `${id} (${failures.get(id)!.replace(` ${id}`, '')})`);
      const answered = tried.filter((id) => !failures.has(id));
      if (answered.length === 0) return new Error(`no sentinel could be reached: ${unreached.join(', ')}`);
      // reached, and none named a primary: a wrong name in the URL, most often
      const told = `${answered.join(', ')}: ${last ?? 'no address'}`;
      return new Error(`no sentinel named the primary "${name}": ${unreached.length > 0 ? `${unreached.join(', ')} not reached; ${told}` : told}`);
    },
    close() {
      sentinels.close();
    },
  };
}
