// Accounts in Redis: one JSON value under `portico:account:<id>`, read through the in-process cache
// (redis-cache.ts) that redis.ts hands in and redis-notices.ts keeps current, so an account's plan
// costs no round trip on a /v1 request.
import type { Cache } from './redis-cache.ts';
import type { RedisCommands } from './redis-commands.ts';
import { publishNotice } from './redis-notices.ts';
import type { Account, AccountStore } from './types.ts';

export function openRedisAccounts({ client, write }: RedisCommands, accountCache: Cache<string, Account | null>): AccountStore {
  return {
    create: async (account) => {
      await write(() => client.set(`portico:account:${account.id}`, JSON.stringify(account)));
      // this instance may hold "unknown" for it; on a Cluster its own notice comes back later
      accountCache.put(account.id, account);
    },
    get: (id) =>
      accountCache.read(id, async () => {
        const text = await client.get(`portico:account:${id}`);
        return text === null ? null : (JSON.parse(text) as Account);
      }),
    update: async (account) => {
      const done = await write(() => client.set(`portico:account:${account.id}`, JSON.stringify(account), 'XX'));
      if (done === null) return null;
      accountCache.markStale(account.id, true);
      await publishNotice(client, `account:${account.id}`);
      return account;
    },
  };
}
