// A server the sentinels name (the announced primary, or the one a failover replaces), and whether a
// connection is on it. Compared by addresses: with `announce-hostnames` the sentinels name a hostname,
// and a connection's peer is an address.
import type { Redis } from 'ioredis';
import type { RedisAddress } from './redis-url.ts';
import { addressesOf } from './sentinel-events.ts';

/** a server named by the sentinels, since `at`; `found`: its addresses once looked up */
export interface Named {
  server: RedisAddress;
  at: number;
  addresses: Promise<string[]>;
  found?: string[];
}

export function named(server: RedisAddress, at: number): Named {
  const out: Named = { server, at, addresses: addressesOf(server.host) };
  void out.addresses.then((found) => (out.found = found));
  return out;
}

/** runs `check` with `name`'s addresses: at once when they are known (before anything is sent on a new connection) */
export function withAddresses(name: Named, check: (found: string[]) => void): void {
  if (name.found) check(name.found);
  else void name.addresses.then(check);
}

/** the same server: the same name and port, or one of the same addresses */
export async function same(found: RedisAddress, name: Named): Promise<boolean> {
  if (found.port !== name.server.port) return false;
  if (found.host === name.server.host) return true;
  const [theirs, ours] = await Promise.all([addressesOf(found.host), name.addresses]);
  return theirs.some((address) => ours.includes(address));
}

/** whether `client` is ready on `port` at one of `addresses`; null while it is not ready (being made, it asks the sentinels) */
export function peerIs(client: Redis, addresses: string[], port: number): boolean | null {
  if (client.status !== 'ready') return null;
  const stream = (client as unknown as { stream?: { remoteAddress?: string; remotePort?: number } }).stream;
  const peer = stream?.remoteAddress;
  return stream?.remotePort === port && peer !== undefined && addresses.some((address) => peer === address || peer === `::ffff:${address}`);
}
