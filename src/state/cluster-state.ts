// Where the state lives on a Cluster, and the connection to the node holding it.
//
// Key layout on a Cluster: every state key is prefixed with the hash tag `{portico}:` (ioredis's
// keyPrefix), so all of them live in one slot. Every script and MULTI the stores run therefore works
// unchanged, and listings (the domain index, the renewal schedule, the project list) are one key or one
// hash: none needs a scan over every primary. State is small and changes rarely; what takes every
// request, the rate-limit counters, is one hash per account and environment (`portico:rl:{<subject>}`) and is
// spread over every primary. One server and Sentinel keep the unprefixed names, so existing data stays.
import type { Cluster, Redis } from 'ioredis';
import { keySlot } from './redis-slot.ts';

/** the hash tag of every state key on a Cluster */
export const CLUSTER_KEY_PREFIX = '{portico}:';
export const STATE_SLOT = keySlot(CLUSTER_KEY_PREFIX);

// The connection to the primary ioredis's slot map names for the state slot, or an error when it has
// none. Not ioredis's routing for a command given the slot: when the node it names has no connection
// (a killed primary's leaves the pool at once; the slot map names it until the failover ends) that
// picks any other node. A PING there answered PONG, so the view of Redis said "up" again and again
// during a failover while every write to the state slot failed, and a WAIT there confirmed nothing of ours.
// Like the cluster's own routing (enableOfflineQueue: false), a node still connecting fails at once.
export function stateNode(cluster: Cluster): Redis {
  const owner = cluster.slots[STATE_SLOT]?.[0];
  const node = owner === undefined ? undefined : cluster.nodes('master').find((n) => `${n.options.host}:${n.options.port}` === owner);
  if (!node) throw connectionError(`no connection to the primary holding the state (slot ${STATE_SLOT}${owner ? `, last known at ${owner}` : ''}): a failover is under way`);
  if (node.status !== 'ready' && node.status !== 'wait') throw connectionError(`the connection to the primary holding the state (${owner}) is ${node.status}`);
  return node;
}

function connectionError(message: string): Error {
  return Object.assign(new Error(message), { code: 'REDIS_CONNECTION' });
}
