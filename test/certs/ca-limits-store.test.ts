// The CA limits' token buckets: the arithmetic (pure), then one contract run against both backends —
// the embedded file (durable across a reopen) and Redis (one Lua script; concurrent takes from many
// clients never hand out more than the bucket holds).
import t from 'tap';
import { Redis } from 'ioredis';
import { applyTake, orderRequests, settleRequests, registeredDomain, type BucketRequest, type CaLimitStore } from '../../src/certs/ca-limits.ts';
import { openFileCaLimits } from '../../src/certs/ca-limits-file.ts';
import { openRedisCaLimits } from '../../src/certs/ca-limits-redis.ts';
import { resolveIssuers, LETS_ENCRYPT_LIMITS } from '../../src/certs/issuers.ts';
import { startRedis } from '../helpers/redis.ts';
import { tempDir } from '../helpers/portico.ts';

const HOUR = 3_600_000;
const orders = (capacity: number, need = 1, take = 1): BucketRequest => ({ limit: 'new_orders', key: '', capacity, periodMs: 3 * HOUR, need, take });

t.test("defaults: Let's Encrypt's published limits for its directories, none for others; the variables override both", async (t) => {
  const [le, other] = resolveIssuers([{ directory: 'https://acme-v02.api.letsencrypt.org/directory' }, { directory: 'https://acme.zerossl.com/v2/DV90' }], ['letsencrypt.org'], {});
  t.same(le.limits, LETS_ENCRYPT_LIMITS);
  t.same(le.limits, { newOrdersPer3h: 300, certsPerDomainPerWeek: 50, failedValidationsPerHour: 5 });
  t.same(other.limits, { newOrdersPer3h: null, certsPerDomainPerWeek: null, failedValidationsPerHour: null });
  t.same(other.caa, ['sectigo.com', 'zerossl.com'], 'known CAs bring their CAA identities');
  const [overridden] = resolveIssuers([{ directory: 'https://acme.zerossl.com/v2/DV90', limits: { certsPerDomainPerWeek: 7 } }], [], { newOrdersPer3h: 10 });
  t.same(overridden.limits, { newOrdersPer3h: 10, certsPerDomainPerWeek: 7, failedValidationsPerHour: null }, 'the issuer entry wins over the variables');
  t.same(orderRequests(other, 'shop.example.com'), [], 'no limits: nothing to take');
  t.equal(registeredDomain('a.b.shop.example.co.uk'), 'example.co.uk', 'certificates count per registered domain (Public Suffix List)');
});

t.test('buckets refill continuously: 300 per 3 h is one more every 36 s once spent', async (t) => {
  const request = orders(300);
  let state = [undefined] as Array<{ tokens: number; at: number } | undefined>;
  for (let i = 0; i < 300; i++) {
    const { result, next } = applyTake(state, [request], 0);
    if (!result.ok) t.fail(`take ${i}`);
    state = next;
  }
  const spent = applyTake(state, [request], 0);
  t.same(spent.result, { ok: false, limit: 'new_orders', retryAt: 36_000, refillMs: 36_000 });
  t.notOk(applyTake(state, [request], 35_999).result.ok, 'not a millisecond early');
  t.ok(applyTake(state, [request], 36_000).result.ok, 'one order 36 s later');
  const week = { limit: 'certs_per_domain' as const, key: 'example.com', capacity: 50, periodMs: 7 * 24 * HOUR, need: 1, take: 1 };
  const empty = applyTake([{ tokens: 0, at: 0 }], [week], 0).result;
  t.equal(!empty.ok && Math.round(empty.retryAt / 60_000), 202, 'one certificate per registered domain every ~3.4 h once 50 are spent');
});

function contract(name: string, open: () => Promise<{ store: CaLimitStore; reopen(): Promise<CaLimitStore>; close(): Promise<void> }>) {
  t.test(`${name}: all or nothing, refunds, and the budget outlives a reopen`, async (t) => {
    const { store, reopen, close } = await open();
    t.teardown(close);
    const [issuer] = resolveIssuers([{ directory: 'https://ca.test/dir', limits: { newOrdersPer3h: 2, certsPerDomainPerWeek: 1, failedValidationsPerHour: 1 } }], [], {});
    const at = 1_000_000;
    t.same(await store.take(issuer.id, orderRequests(issuer, 'a.example.com'), at), { ok: true });
    const blocked = await store.take(issuer.id, orderRequests(issuer, 'b.example.com'), at);
    t.match(blocked, { ok: false, limit: 'certs_per_domain' }, 'the second certificate for example.com this week waits');
    t.same(await store.peek(issuer.id, orderRequests(issuer, 'x.example.org'), at), [1, 1, 1], 'and took nothing: one order is still left');
    // the failed order's certificate is given back; a failed validation is counted for its hostname
    await store.take(issuer.id, settleRequests(issuer, 'a.example.com', { ordered: true, issued: false, failedValidation: true }), at);
    t.match(await store.take(issuer.id, orderRequests(issuer, 'a.example.com'), at), { ok: false, limit: 'failed_validations', retryAt: at + HOUR });
    t.same(await store.take(issuer.id, orderRequests(issuer, 'b.example.com'), at), { ok: true }, 'b takes the certificate a gave back');
    const again = await reopen();
    t.match(await again.take(issuer.id, orderRequests(issuer, 'c.example.net'), at), { ok: false, limit: 'new_orders', retryAt: at + 1.5 * HOUR }, 'both orders are still spent after a reopen');
    t.same(await again.take(issuer.id, orderRequests(issuer, 'c.example.net'), at + 1.5 * HOUR), { ok: true }, 'one back after 3 h / 2');
  });
}

contract('embedded', async () => {
  const dir = tempDir('ca-limits');
  return { store: openFileCaLimits(dir), reopen: async () => openFileCaLimits(dir), close: async () => undefined };
});

const redis = await startRedis();
t.teardown(() => redis.stop());
contract('redis', async () => {
  const clients = [new Redis(redis.url), new Redis(redis.url)];
  await clients[0].flushall();
  return { store: openRedisCaLimits(clients[0]), reopen: async () => openRedisCaLimits(clients[1]), close: async () => { clients.forEach((c) => c.disconnect()); } };
});

t.test('redis: 40 concurrent takes from four clients against a bucket of 5 get exactly 5', async (t) => {
  const clients = Array.from({ length: 4 }, () => new Redis(redis.url));
  t.teardown(() => clients.forEach((c) => c.disconnect()));
  const stores = clients.map((c) => openRedisCaLimits(c));
  const results = await Promise.all(Array.from({ length: 40 }, (_, i) => stores[i % 4].take('race', [orders(5)], 5_000)));
  t.equal(results.filter((r) => r.ok).length, 5);
  const keys = await clients[0].keys('portico:acme-limit:{race}*');
  t.same(keys, ['portico:acme-limit:{race}:new_orders:'], 'one key per bucket, under the issuer\'s hash tag');
  t.ok((await clients[0].pttl(keys[0])) > 0, 'it expires once it would be full again');
});
