// PORTICO_REDIS_URL=rediss://… end to end (DESIGN §2, §4): a real Portico (`portico serve`, its
// workers) against a TLS-only redis-server with a throwaway self-signed certificate. Portico has no
// Redis CA setting of its own: the certificate is trusted through NODE_EXTRA_CA_CERTS in Portico's
// environment, which covers both connections, ioredis (state) and the limiter's own RESP connection.
//
// `ratelimit.onRedisDown: closed` throughout: a /v1 call whose limiter cannot reach Redis answers
// 503, so every 200 below was counted in Redis by the limiter over TLS, never locally.
// Limits are set by the day (perDay below perMinute), so the reported window cannot roll over
// between two calls the way the minute can.
import t from 'tap';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { spawnPortico, tempDir, cleanup } from '../helpers/portico.ts';
import { admin, api, accountWithKey, type Answer } from '../helpers/client.ts';
import { parseExposition, scrape, sum } from '../helpers/prometheus.ts';
import { startRedis } from '../helpers/redis.ts';

const run = promisify(execFile);
const CLI = path.resolve(import.meta.dirname, '../../src/cli/main.ts');

const redis = await startRedis({ tls: true });
t.teardown(() => redis.stop());
const caFile = redis.caFile!;

const portico = await spawnPortico({ PORTICO_REDIS_URL: redis.url, NODE_EXTRA_CA_CERTS: caFile, PORTICO_RATELIMIT_ON_REDIS_DOWN: 'closed' });
t.teardown(async () => {
  await portico.kill('SIGKILL');
  cleanup(portico.env.PORTICO_DATA_DIR, portico.env.PORTICO_CERTS_DIR);
});

/** redis-cli over TLS, trusting the same certificate */
const redisCli = async (...args: string[]) =>
  (await run('redis-cli', ['--tls', '--cacert', caFile, '-h', 'localhost', '-p', String(redis.port), ...args])).stdout.trim();
const categories = (key: string | null) => api(portico.ports.https, portico.ca, key, { path: '/v1/categories' });
const commandErrors = async () => sum(parseExposition(await scrape(portico.ports.admin)), 'portico_redis_command_errors_total');
const dayUsed = (accountId: string) => redisCli('HGET', `portico:rl:{${accountId}:production}`, 'dayUsed');

function limitHeaders(answer: Answer): [limit: number, remaining: number] {
  return [Number(answer.headers['x-ratelimit-limit']), Number(answer.headers['x-ratelimit-remaining'])];
}

let counted: { key: string; accountId: string };

t.test('Portico starts on rediss:// and is ready with Redis', async (t) => {
  t.match(redis.url, /^rediss:\/\/localhost:\d+$/);
  t.ok(portico.logs.some((line) => line.includes('state in Redis')), 'logs that its state is in Redis');
  const ready = await admin(portico.ports.admin, 'GET', '/readyz');
  t.equal(ready.status, 200, `/readyz: ${ready.text}`);
  t.match(ready.json, { status: 'ok', redis: 'ok' });
});

t.test('every /v1 call is counted once in Redis by the limiter over TLS', async (t) => {
  counted = await accountWithKey(portico.ports.admin, 'enterprise', 'production', { perMinute: 1000, perDay: 100 });
  const remaining: number[] = [];
  for (let i = 0; i < 10; i++) {
    const answer = await categories(counted.key);
    t.equal(answer.status, 200, `call ${i + 1}: ${answer.text}`);
    const [limit, left] = limitHeaders(answer);
    t.equal(limit, 100, `call ${i + 1}: the day window is reported`);
    remaining.push(left);
  }
  t.same(remaining, [99, 98, 97, 96, 95, 94, 93, 92, 91, 90], 'X-RateLimit-Remaining goes down by exactly 1 a call');
  t.equal(await dayUsed(counted.accountId), '10', 'the day counter in Redis holds the 10 calls');
  const clients = await redisCli('CLIENT', 'LIST');
  t.match(clients, /name=portico-limiter /, "the limiter's own connection is open (the server takes only TLS)");
  t.equal(await commandErrors(), 0, 'no limiter call failed');
});

t.test('a tiny limit is enforced from Redis: 429 with Retry-After on the 4th call', async (t) => {
  const { key, accountId } = await accountWithKey(portico.ports.admin, 'enterprise', 'production', { perMinute: 1000, perDay: 3 });
  const answers: Answer[] = [];
  for (let i = 0; i < 4; i++) answers.push(await categories(key));
  t.same(answers.map((a) => a.status), [200, 200, 200, 429]);
  t.same(answers.map((a) => limitHeaders(a)[1]), [2, 1, 0, 0], 'remaining 2, 1, 0, then 0 on the refusal');
  const refused = answers[3];
  t.match(refused.json, { code: 'rate_limited', status: 429 });
  t.match(refused.headers['retry-after'], /^\d+$/, `Retry-After is whole seconds (${refused.headers['retry-after']})`);
  t.ok(Number(refused.headers['retry-after']) >= 1, 'Retry-After >= 1');
  t.equal(await dayUsed(accountId), '3', 'the refused call consumed nothing');
});

t.test('without the Redis certificate trusted, Portico does not start', async (t) => {
  // the same settings, and this process's own NODE_EXTRA_CA_CERTS (if any), which lacks the
  // throwaway certificate; one worker, so the failure is the process's exit (a primary would
  // replace a worker that fails this way over and over, and never listen)
  const dataDir = tempDir('data');
  const certsDir = tempDir('certs');
  t.teardown(() => cleanup(dataDir, certsDir));
  const env = { ...process.env, ...portico.env, PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir, NODE_EXTRA_CA_CERTS: process.env.NODE_EXTRA_CA_CERTS ?? '' };
  const failed = await run(process.execPath, [CLI, 'serve', '--workers', '1'], { env, timeout: 15_000 }).then(
    () => null,
    (err: { code?: number; killed?: boolean; stdout: string; stderr: string }) => err,
  );
  if (failed === null) return void t.fail('portico exited 0');
  t.equal(failed.killed, false, 'it exited by itself');
  t.equal(failed.code, 1, `exit code 1; stderr: ${failed.stderr}`);
  t.match(failed.stderr, /portico: state backend unavailable: .*certificate/i, 'the reason names the certificate');
  t.match(failed.stdout, /Portico could not start/, 'logs why at fatal level');
  t.notMatch(failed.stdout, /Portico listening/, 'never listened');
});

t.test('rediss:// to a Redis that speaks plain RESP: the start stops and says the TLS handshake did not finish', async (t) => {
  const plain = await startRedis();
  t.teardown(() => plain.stop());
  const dataDir = tempDir('data');
  const certsDir = tempDir('certs');
  t.teardown(() => cleanup(dataDir, certsDir));
  const env = { ...process.env, ...portico.env, PORTICO_REDIS_URL: `rediss://127.0.0.1:${plain.port}`, PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir };
  const failed = await run(process.execPath, [CLI, 'serve', '--workers', '1'], { env, timeout: 20_000 }).then(
    () => null,
    (err: { code?: number; killed?: boolean; stdout: string; stderr: string }) => err,
  );
  if (failed === null) return void t.fail('portico exited 0');
  t.equal(failed.code, 1, `exit code 1; stderr: ${failed.stderr}`);
  t.match(failed.stderr, /the TLS handshake did not finish \(rediss:\/\/ needs a port that speaks TLS\)/, 'the reason says what to check');
  t.notMatch(failed.stderr, /Stream isn't writeable/, 'not ioredis\'s queue message');
});

t.test('a running Portico refuses Redis back with a certificate it does not trust', async (t) => {
  const before = await categories(null);
  t.equal(before.status, 401, 'anonymous calls reach the limiter (and are counted) before the key check');
  t.match(before.headers['x-ratelimit-remaining'], /^\d+$/);

  await redis.restartWithNewCertificate();
  // Both connections retry with backoff (the limiter's at most 1 s apart): by now one that skipped
  // verification would be connected again. They must refuse the new certificate instead, so in
  // `closed` mode every /v1 call is 503, an anonymous one because its limiter call fails.
  await sleep(1500);
  for (const [what, key] of [['anonymous', null], ['anonymous', null], ['keyed', counted.key], ['anonymous', null], ['keyed', counted.key]] as const) {
    const answer = await categories(key);
    t.equal(answer.status, 503, `${what}: 503, not served (${answer.status} ${answer.text})`);
    t.match(answer.json, { code: 'service_unavailable', status: 503 });
    t.match(answer.headers['retry-after'], /^\d+$/, `${what}: Retry-After`);
  }
  t.ok((await commandErrors()) >= 1, 'the limiter reported its failed calls');
  const ready = await admin(portico.ports.admin, 'GET', '/readyz');
  t.equal(ready.status, 503, `/readyz: ${ready.text}`);
  t.match(ready.json, { redis: 'down' });
});
