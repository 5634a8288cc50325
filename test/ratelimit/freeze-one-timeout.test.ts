// Regression: during a Redis freeze (SIGSTOP) a /v1 request waited out two command timeouts, one for
// its limiter call and one for a state read, one after the other (GET /v1/categories/1: 614 ms with a
// 300 ms timeout; ~300 ms with the default 150 ms). README "Redis outages": a request waits one
// command timeout at most, whichever of the two waits first. A real redis-server, a real Portico.
import t, { type Test } from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { startPortico, type Instance } from '../helpers/portico.ts';
import { api, admin, accountWithKey, type Answer } from '../helpers/client.ts';
import { startRedis, type RedisServer } from '../helpers/redis.ts';

const TIMEOUT_MS = 300;
// one timeout plus what a loaded 2-core machine adds (TLS handshake, timers); two timeouts are 600+
const MAX_MS = 550;
// FailoverLimiter's breaker period in main.ts: requests this far apart each find it ready to probe again
const BREAKER_MS = 1000;

interface Setup {
  redis: RedisServer;
  portico: Instance;
  accountId: string;
  get(path: string): Promise<Answer & { ms: number }>;
}

async function setUp(t: Test): Promise<Setup> {
  const redis = await startRedis();
  const portico = await startPortico({ PORTICO_REDIS_URL: redis.url, PORTICO_REDIS_COMMAND_TIMEOUT_MS: String(TIMEOUT_MS) });
  t.teardown(async () => {
    if (redis.process.exitCode === null && redis.process.signalCode === null) redis.process.kill('SIGCONT');
    await portico.stop();
    await redis.stop();
  });
  const { key, accountId } = await accountWithKey(portico.ports.admin, 'enterprise', 'production', { perMinute: 100_000, perDay: 1_000_000 });
  const get = async (path: string) => {
    const started = performance.now();
    const answer = await api(portico.ports.https, portico.ca, key, { path });
    return { ...answer, ms: performance.now() - started };
  };
  const created = await api(portico.ports.https, portico.ca, key, { method: 'POST', path: '/v1/categories', json: { name: 'Dog' } });
  t.equal(created.status, 201);
  // the list is cached: GET /v1/categories/:id answers from it while Redis cannot
  t.equal((await get('/v1/categories')).status, 200);
  return { redis, portico, accountId, get };
}

t.test('GET /v1/categories/:id during a freeze: the limiter call times out, the category read does not wait again', async (t) => {
  const s = await setUp(t);
  process.kill(s.redis.process.pid!, 'SIGSTOP');
  // spaced by more than the breaker period: each request could find the limiter calling Redis again
  for (let i = 1; i <= 4; i++) {
    const answer = await s.get('/v1/categories/1');
    t.equal(answer.status, 200, `request ${i}: ${answer.status} ${answer.text}`);
    t.match(answer.json, { id: 1, name: 'Dog' }, `request ${i}: from the cached list`);
    t.ok(answer.ms < MAX_MS, `request ${i}: ${answer.ms.toFixed(0)} ms (command timeout ${TIMEOUT_MS} ms)`);
    await sleep(BREAKER_MS + 100);
  }
});

t.test('a /v1 request whose state read times out during a freeze does not wait for the limiter too', async (t) => {
  const s = await setUp(t);
  // a plan change marks the cached account to be read again at its next use: the next /v1 request
  // reads it (state first), then calls the limiter, whose breaker has seen no failure yet
  const patched = await admin(s.portico.ports.admin, 'PATCH', `/admin/accounts/${s.accountId}`, { limits: { perMinute: 200_000, perDay: 2_000_000 } });
  t.equal(patched.status, 200, `PATCH: ${patched.text}`);
  await sleep(200); // its change notice comes back to this instance too
  process.kill(s.redis.process.pid!, 'SIGSTOP');
  const answer = await s.get('/v1/categories');
  t.equal(answer.status, 200, `${answer.status} ${answer.text}`);
  t.match(answer.json, [{ id: 1, name: 'Dog' }], 'the cached list');
  t.ok(answer.ms < MAX_MS, `${answer.ms.toFixed(0)} ms (command timeout ${TIMEOUT_MS} ms)`);
});
