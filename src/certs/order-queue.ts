// Orders waiting for a CA limit (DESIGN §6), in verification order: the hostname and when it joined
// (its score). Embedded: `<data dir>/acme-queue.json`, rewritten durably on each change (the queue
// holds what is waiting, not every domain). Redis: the sorted set `portico:acme-queue`.
// A hostname is in the queue at most once; adding it again keeps its place.
import path from 'node:path';
import type { Redis, Cluster } from 'ioredis';
import { unavailableOnError } from '../state/types.ts';
import type { Guard } from '../state/redis-cache.ts';
import { readJson, writeJsonDurably } from './durable-file.ts';

export interface QueuedOrder {
  hostname: string;
  /** ms since the epoch: its place in line */
  since: number;
}

export interface OrderQueue {
  add(hostname: string, since: number): Promise<void>;
  remove(hostname: string): Promise<void>;
  /** the first `count` in line, first first */
  head(count: number): Promise<QueuedOrder[]>;
  size(): Promise<number>;
}

export function openFileOrderQueue(dataDir: string): OrderQueue {
  const file = path.join(dataDir, 'acme-queue.json');
  const entries = new Map<string, number>(Object.entries(readJson<Record<string, number>>(file, {})));
  const save = () => writeJsonDurably(file, Object.fromEntries(entries));
  return {
    async add(hostname, since) {
      if (entries.has(hostname)) return;
      entries.set(hostname, since);
      save();
    },
    async remove(hostname) {
      if (entries.delete(hostname)) save();
    },
    async head(count) {
      return [...entries].map(([hostname, since]) => ({ hostname, since })).sort((a, b) => a.since - b.since || (a.hostname < b.hostname ? -1 : 1)).slice(0, count);
    },
    async size() {
      return entries.size;
    },
  };
}

const QUEUE = 'portico:acme-queue';

/** `call`: the state's command path (state/redis-commands.ts); a plain client's errors are STATE_UNAVAILABLE */
export function openRedisOrderQueue(client: Redis | Cluster, call: Guard = unavailableOnError): OrderQueue {
  return {
    async add(hostname, since) {
      await call(() => client.zadd(QUEUE, 'NX', since, hostname));
    },
    async remove(hostname) {
      await call(() => client.zrem(QUEUE, hostname));
    },
    async head(count) {
      const flat = await call(() => client.zrange(QUEUE, '0', String(count - 1), 'WITHSCORES'));
      const out: QueuedOrder[] = [];
      for (let i = 0; i < flat.length; i += 2) out.push({ hostname: flat[i], since: Number(flat[i + 1]) });
      return out;
    },
    size: () => call(() => client.zcard(QUEUE)),
  };
}
