// Two real Portico processes sharing one real redis-server (DESIGN §2 PORTICO_REDIS_URL, §5, §8):
// what one instance writes the other serves, ids never collide, and a revoked key stops working on
// every instance at once — including one that had just served it from its cache.
import t from 'tap';
import { spawnPortico, cleanup } from '../helpers/portico.ts';
import { api, admin, accountWithKey } from '../helpers/client.ts';
import { startRedis } from '../helpers/redis.ts';
import { roomInMinute } from '../helpers/minute.ts';

const redis = await startRedis();
t.teardown(() => redis.stop());

const a = await spawnPortico({ PORTICO_REDIS_URL: redis.url });
t.teardown(async () => {
  await a.kill('SIGKILL');
  cleanup(a.env.PORTICO_DATA_DIR, a.env.PORTICO_CERTS_DIR);
});
const b = await spawnPortico({ PORTICO_REDIS_URL: redis.url });
t.teardown(async () => {
  await b.kill('SIGKILL');
  cleanup(b.env.PORTICO_DATA_DIR, b.env.PORTICO_CERTS_DIR);
});

const onA = (key: string, options: Parameters<typeof api>[3] = {}) => api(a.ports.https, a.ca, key, options);
const onB = (key: string, options: Parameters<typeof api>[3] = {}) => api(b.ports.https, b.ca, key, options);

t.test('both instances use Redis, not an embedded data dir', async (t) => {
  for (const instance of [a, b]) {
    t.ok(instance.logs.some((line) => line.includes('state in Redis')), 'logs that its state is in Redis');
    const ready = await admin(instance.ports.admin, 'GET', '/readyz');
    t.equal(ready.status, 200);
    t.match(ready.json, { redis: 'ok' });
  }
});

t.test('an account and key created on A work on B', async (t) => {
  const { key, accountId } = await accountWithKey(a.ports.admin, 'business');
  const account = await admin(b.ports.admin, 'GET', `/admin/accounts/${accountId}`);
  t.equal(account.status, 200, 'B knows the account');
  t.match(account.json, { id: accountId, plan: 'business' });
  const answer = await onB(key, { path: '/v1/categories' });
  t.equal(answer.status, 200, 'B accepts the key made on A');
  t.equal(answer.headers['x-ratelimit-limit'], '1000', 'with the business limit of the account');

  // a plan change on B applies on A at once, and the counts are shared
  t.equal((await admin(b.ports.admin, 'PATCH', `/admin/accounts/${accountId}`, { plan: 'pro' })).status, 200);
  await roomInMinute(2);
  const first = await onA(key, { path: '/v1/categories' });
  t.equal(first.status, 200);
  t.equal(first.headers['x-ratelimit-limit'], '300', 'A sees the plan changed on B');
  const second = await onB(key, { path: '/v1/categories' });
  t.equal(Number(second.headers['x-ratelimit-remaining']), Number(first.headers['x-ratelimit-remaining']) - 1, 'one counter for both instances');
});

t.test('categories created on A are listed on B, even after B cached the list', async (t) => {
  const { key } = await accountWithKey(a.ports.admin, 'pro');
  const before = await onB(key, { path: '/v1/categories' });
  t.equal(before.status, 200);
  const known = new Set(before.json.map((c: { id: number }) => c.id));

  const made: Array<{ id: number; name: string }> = [];
  for (const name of ['Dog', 'Cat', 'Fish']) {
    const created = await onA(key, { method: 'POST', path: '/v1/categories', json: { name } });
    t.equal(created.status, 201);
    made.push(created.json);
    const listed = await onB(key, { path: '/v1/categories' });
    t.equal(listed.status, 200);
    t.ok(listed.json.some((c: { id: number; name: string }) => c.id === created.json.id && c.name === name), `B lists ${name} right after A created it`);
  }
  for (const c of made) t.notOk(known.has(c.id), `id ${c.id} is new`);
  const one = await onB(key, { path: `/v1/categories/${made[0].id}` });
  t.equal(one.status, 200);
  t.same(one.json, made[0], 'B serves the single category created on A');

  const staging = await accountWithKey(b.ports.admin, 'pro', 'staging');
  const stagingList = await api(a.ports.https, a.ca, staging.key, { path: '/v1/categories', hostname: 'api.staging.localhost' });
  t.equal(stagingList.status, 200);
  t.same(stagingList.json, [], 'staging does not see production categories');
});

t.test('40 concurrent creates split across A and B get 40 distinct ids', async (t) => {
  const { key } = await accountWithKey(a.ports.admin, 'business');
  const answers = await Promise.all(
    Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? onA : onB)(key, { method: 'POST', path: '/v1/categories', json: { name: `split-${i}` } })),
  );
  t.same(answers.map((x) => x.status), Array(40).fill(201), 'every create answered 201');
  const ids = answers.map((x) => x.json.id as number);
  t.equal(new Set(ids).size, 40, `40 distinct ids: ${ids.join(',')}`);
  for (const [i, x] of answers.entries()) {
    t.equal(x.headers.location, `/v1/categories/${x.json.id}`);
    t.equal(x.json.name, `split-${i}`);
  }
  for (const instance of [onA, onB]) {
    const list = await instance(key, { path: '/v1/categories' });
    const listed = new Set(list.json.map((c: { id: number }) => c.id));
    t.ok(ids.every((id) => listed.has(id)), 'each instance lists all 40');
  }
});

t.test('a key revoked on A gets 401 on B on the very next request', async (t) => {
  // several rounds: B's cache must be dropped before the 204 reaches the caller, every time
  for (let round = 0; round < 5; round++) {
    const { key, keyId } = await accountWithKey(a.ports.admin, 'pro');
    const served = await onB(key, { path: '/v1/categories' });
    t.equal(served.status, 200, `round ${round}: B served the key just before (and cached it)`);
    const servedOnA = await onA(key, { path: '/v1/categories' });
    t.equal(servedOnA.status, 200, `round ${round}: A served it too`);
    const revoked = await admin(a.ports.admin, 'DELETE', `/admin/keys/${keyId}`);
    t.equal(revoked.status, 204);
    const refused = await onB(key, { path: '/v1/categories' });
    t.equal(refused.status, 401, `round ${round}: B refuses it at once`);
    t.match(refused.json, { code: 'unauthorized', status: 401 });
    t.equal((await onA(key, { path: '/v1/categories' })).status, 401, `round ${round}: A refuses it too`);
  }
});
