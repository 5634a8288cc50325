// What the sentinels say, read: their failover events (+switch-master, +selected-slave), their answer
// to SENTINEL SENTINELS, and the addresses a name they give stands for. Pure parsing and one DNS
// look-up, for sentinel-listeners.ts and sentinel-named.ts.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { RedisAddress } from './redis-url.ts';

/** `<name> <old ip> <old port> <new ip> <new port>` → the new primary, for the primary named `name` */
export function announcedPrimary(message: string, name: string): RedisAddress | null {
  const fields = message.split(' ');
  if (fields.length !== 5 || fields[0] !== name) return null;
  const port = portOf(fields[4]);
  return port === null ? null : { host: fields[3], port };
}

/**
 * `slave <ip>:<port> <ip> <port> @ <name> <primary ip> <primary port>` (+selected-slave: a failover
 * has chosen the replica to promote) → the primary it replaces, for the primary named `name`
 */
export function selectedFrom(message: string, name: string): RedisAddress | null {
  const fields = message.split(' ');
  if (fields.length !== 8 || fields[4] !== '@' || fields[5] !== name) return null;
  const port = portOf(fields[7]);
  return port === null ? null : { host: fields[6], port };
}

/** SENTINEL SENTINELS' reply (one field list per other sentinel) → those still connected to the asked one */
export function otherSentinels(reply: unknown): RedisAddress[] {
  if (!Array.isArray(reply)) return [];
  const out: RedisAddress[] = [];
  for (const fields of reply) {
    if (!Array.isArray(fields)) continue;
    const field = (key: string) => {
      for (let at = 0; at + 1 < fields.length; at += 2) if (fields[at] === key && typeof fields[at + 1] === 'string') return fields[at + 1] as string;
      return undefined;
    };
    const host = field('ip');
    const port = portOf(field('port'));
    if (!host || port === null) continue;
    // one found down is passed over; one merely `disconnected` (its links being made again, as in the
    // first seconds of a topology) is still a sentinel that may lead the next failover
    if ((field('flags') ?? '').split(',').includes('s_down')) continue;
    out.push({ host, port });
  }
  return out;
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

/** a TCP port written in decimal, or null */
function portOf(text: string | undefined): number | null {
  if (text === undefined || !/^[0-9]{1,5}$/.test(text)) return null;
  const port = Number(text);
  return port > 0 && port <= 65535 ? port : null;
}
