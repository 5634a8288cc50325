// Following a Sentinel failover as soon as it is announced, once.
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
// An announcement names the new primary as the sentinels know it (`<name> <old ip> <old port> <new ip>
// <new port>`): an address, or with `announce-hostnames` (Kubernetes charts set it) a hostname, which is
// looked up and compared by its addresses, as a connection's peer is one. A connection whose peer cannot
// be matched (the lookup failed, another address for the same server) is reconnected: one gap too many,
// never a missed failover.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { Redis } from 'ioredis';
import type { RedisAddress, RedisTarget } from './redis-url.ts';

const CHANNEL = '+switch-master';

export interface SwitchFollower {
  close(): void;
}

/**
 * Subscribes to +switch-master on every sentinel of `target` (a Sentinel URL's) and moves each of
 * `clients` to the announced primary of its primary name when it is not already there.
 */
export function followSwitches(target: Pick<RedisTarget, 'addresses' | 'name' | 'tls' | 'sentinelUsername' | 'sentinelPassword'>, clients: Redis[]): SwitchFollower {
  const name = target.name!;
  const listeners = target.addresses.map((sentinel) => {
    const listener = new Redis({
      host: sentinel.host,
      port: sentinel.port,
      tls: target.tls ? {} : undefined,
      username: target.sentinelUsername,
      password: target.sentinelPassword,
      connectionName: 'portico-switch',
      // it only subscribes: keep trying, never fail a command
      enableOfflineQueue: true,
      maxRetriesPerRequest: null,
      retryStrategy: (attempt) => Math.min(100 * attempt, 2000),
      lazyConnect: false,
    });
    // a sentinel that is away is one announcement fewer; the others (and the lost connection) still tell
    listener.on('error', () => undefined);
    listener.subscribe(CHANNEL).catch(() => undefined);
    listener.on('message', (channel: string, message: string) => {
      if (channel !== CHANNEL) return;
      const primary = announcedPrimary(message, name);
      if (primary === null) return;
      // waiting out its backoff after a lost connection: try now, the sentinels name the new primary
      for (const client of clients) if (client.status === 'reconnecting') client.connect().catch(() => undefined);
      void addressesOf(primary.host).then((addresses) => {
        for (const client of clients) if (connectedElsewhere(client, addresses, primary.port)) client.disconnect(true);
      });
    });
    return listener;
  });
  return {
    close() {
      for (const listener of listeners) listener.disconnect();
    },
  };
}

/** `<name> <old ip> <old port> <new ip> <new port>` → the new primary, for the primary named `name` */
export function announcedPrimary(message: string, name: string): RedisAddress | null {
  const fields = message.split(' ');
  if (fields.length !== 5 || fields[0] !== name) return null;
  const port = Number(fields[4]);
  if (!Number.isInteger(port) || port <= 0 || port > 65535) return null;
  return { host: fields[3], port };
}

/** An announced host's addresses: itself when it is one, else what it resolves to (none if it does not). */
export async function addressesOf(host: string): Promise<string[]> {
  if (isIP(host)) return [host];
  try {
    return (await lookup(host, { all: true })).map((entry) => entry.address);
  } catch {
    return [];
  }
}

/** ready on another server than `port` at one of `addresses`; a connection being made asks the sentinels anyway */
function connectedElsewhere(client: Redis, addresses: string[], port: number): boolean {
  if (client.status !== 'ready') return false;
  const stream = (client as unknown as { stream?: { remoteAddress?: string; remotePort?: number } }).stream;
  const peer = stream?.remoteAddress;
  return !(stream?.remotePort === port && peer !== undefined && addresses.some((address) => peer === address || peer === `::ffff:${address}`));
}
