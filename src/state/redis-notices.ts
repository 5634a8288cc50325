// Change notices on `portico:invalidate`, shared by every instance: a write publishes `<kind>:<id>`,
// and each instance drops or marks stale its cached copy (redis-cache.ts), follows a changed route
// (redis-routes.ts) and tells the Events store's subscribers. A reconnect of the subscriber may have
// missed notices: everything is read again. What each notice does to which cache is here in one place,
// next to what a reconnect does, since the two must agree.
import type { Redis } from 'ioredis';
import type { Cache, Guard } from './redis-cache.ts';
import type { RedisRouteIndex } from './redis-routes.ts';
import { within } from './redis-commands.ts';
import type { Account, ApiKey, Category, Environment, Events } from './types.ts';

export const CHANNEL = 'portico:invalidate';
/** keys read again at once after a reconnect; the others at their next use */
const KEYS_REREAD_AT_ONCE = 1000;
const ROUTE_RETRY_MS = 1000;
/** a route notice is followed for about a day of Redis being unreachable; a reconnect reloads all anyway */
const ROUTE_RETRIES = 86_400;
/** how long a write's answer waits for its change notice to be taken (see `publishNotice`) */
const NOTICE_WAIT_MS = 200;

// A change notice after a write: waited for, so the other instances have it before this answer
// reaches anyone, but for NOTICE_WAIT_MS at most. On a Cluster PUBLISH goes to any node, and one
// frozen there held a finished write's 201 up for a whole command timeout, after its WAIT had
// waited out its own (2.3 s with a 1000 ms timeout). The notice still goes out when it can.
export function publishNotice(client: Redis, message: string): Promise<void> {
  return within(client.publish(CHANNEL, message).catch(() => undefined), NOTICE_WAIT_MS);
}

export interface NoticeTargets {
  client: Redis;
  subscriber: Redis;
  call: Guard;
  keyCache: Cache<string, ApiKey | null>;
  findByHash(hash: string): Promise<ApiKey | null>;
  categoryLists: Cache<Environment, Category[]>;
  accountCache: Cache<string, Account | null>;
  routeIndex: RedisRouteIndex;
}

// Listens on the subscriber (redis.ts subscribes it to CHANNEL during the start); the Events store
// it returns publishes on the same channel.
export function followNotices(targets: NoticeTargets): Events {
  const { client, subscriber, call, keyCache, findByHash, categoryLists, accountCache, routeIndex } = targets;
  const handlers: Array<(topic: string) => void> = [];
  // Notices may have been missed: every cached entry is read again before it answers. Lists and
  // accounts keep answering from the old copy if that read fails (a missed change is at worst an older
  // list or plan); a key must not (it may have been revoked meanwhile), so the keys in use are read
  // again at once, and until then a failed read is a failure. That starts once the client can read:
  // after a failover the subscriber may be back before it, and keys marked then would fail meanwhile.
  let keysPending = false;
  const rereadKeys = () => {
    keysPending = false;
    keyCache.markAllStale(false);
    let n = 0;
    for (const hash of keyCache.keys()) {
      if (++n > KEYS_REREAD_AT_ONCE) break;
      findByHash(hash).catch(() => undefined);
    }
  };
  const flush = () => {
    categoryLists.markAllStale(true);
    accountCache.markAllStale(true);
    if (client.status === 'ready') rereadKeys();
    else if (!keysPending) {
      keysPending = true;
      client.once('ready', rereadKeys);
    }
    reloadRoutes();
    for (const handler of handlers) handler('*');
  };
  // A failed reload keeps the index it had and is tried again every second until one works: after a
  // failover the subscriber can be back before reads work, and the notices it missed come no more (a
  // domain removed meanwhile stayed routed here until its next notice or a restart).
  let reloadRetry: NodeJS.Timeout | null = null;
  const reloadRoutes = () => {
    if (reloadRetry) clearTimeout(reloadRetry);
    reloadRetry = null;
    routeIndex.reload().catch(() => {
      if (client.status === 'end') return; // the stores are closed
      reloadRetry = setTimeout(reloadRoutes, ROUTE_RETRY_MS);
      reloadRetry.unref();
    });
  };
  subscriber.on('message', (_channel: string, message: string) => {
    const [kind, id] = splitOnce(message);
    // a changed key is dropped (a revoked one must never answer again); a changed list or account is
    // read again at its next use, and answers from its old copy only while Redis cannot be reached
    // (a revocation is final: a key this instance holds as revoked stays so)
    if (kind === 'key') {
      if (!keyCache.get(id)?.value?.revokedAt) keyCache.delete(id);
    } else if (kind === 'key-revoked') {
      // a key this instance holds is revoked: held as such (final), not dropped, so an outage that
      // starts now answers 401 for it, not 503; one it does not hold is read when asked
      const [hash, at] = splitOnce(id);
      const held = keyCache.get(hash)?.value;
      if (held) keyCache.put(hash, { ...held, revokedAt: held.revokedAt ?? at });
      else keyCache.delete(hash);
    }
    else if (kind === 'categories') categoryLists.markStale(id as Environment, true);
    else if (kind === 'account') accountCache.markStale(id, true);
    else if (kind === 'domain' || kind === 'project') {
      // the routing index first (its own read), then whoever else follows the domain
      if (kind === 'domain') refreshRoute(id, 0);
      for (const handler of handlers) handler(message);
    } else flush();
  });
  // messages may have been missed while disconnected
  subscriber.on('ready', flush);

  // A route that could not be read after its notice is taken out of the index (it may be a removal)
  // and read again until that works: a removed domain or redirect never answers from an old copy.
  function refreshRoute(hostname: string, attempt: number): void {
    routeIndex.refresh(hostname).catch(() => {
      routeIndex.applyLocal(hostname, null);
      if (attempt < ROUTE_RETRIES) setTimeout(() => refreshRoute(hostname, attempt + 1), ROUTE_RETRY_MS).unref();
    });
  }

  return {
    publish: async (topic) => {
      await call(() => client.publish(CHANNEL, topic));
    },
    subscribe: (handler) => {
      handlers.push(handler);
    },
  };
}

function splitOnce(message: string): [string, string] {
  const at = message.indexOf(':');
  return at === -1 ? [message, ''] : [message.slice(0, at), message.slice(at + 1)];
}
