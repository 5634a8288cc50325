// Plan rate limits end to end, through real HTTPS (DESIGN §4): the X-RateLimit-* headers
// on every /v1 answer, 429 rate_limited / key_banned, plan changes mid-window, and exact counting
// under parallel load — embedded (one instance) and with Redis (two instances sharing one Redis).
//
// Windows are real time, aligned to the minute: a counting test that straddled a minute boundary
// would see its counts reset. Each one first waits until enough of the current minute is left.
import t, { type Test } from 'tap';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parse, stringify } from 'yaml';
import { startPortico, tempDir, cleanup, type Instance } from '../helpers/portico.ts';
import { api, admin, accountWithKey, type Answer } from '../helpers/client.ts';
import { startRedis, type RedisServer } from '../helpers/redis.ts';
import { roomInMinute } from '../helpers/minute.ts';

interface Headers {
  limit: number;
  remaining: number;
  reset: number;
}

/** The three headers, checked to be present and whole numbers. */
function rl(t: Test, answer: Answer, what = `${answer.status}`): Headers {
  for (const name of ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']) {
    t.match(answer.headers[name], /^\d+$/, `${what}: ${name} present (${answer.headers[name]})`);
  }
  return {
    limit: Number(answer.headers['x-ratelimit-limit']),
    remaining: Number(answer.headers['x-ratelimit-remaining']),
    reset: Number(answer.headers['x-ratelimit-reset']),
  };
}

const minuteEnd = () => Math.ceil(Date.now() / 60_000) * 60;
const dayEnd = () => Math.ceil(Date.now() / 86_400_000) * 86_400;

function expectError(t: Test, answer: Answer, status: number, code: string): void {
  t.equal(answer.status, status, `status ${status}`);
  t.match(answer.json, { code, status, message: String }, `Error body ${code}`);
}

function retryAfter(t: Test, answer: Answer): number {
  const value = answer.headers['retry-after'];
  t.match(value, /^\d+$/, `Retry-After is whole seconds (${value})`);
  const seconds = Number(value);
  t.ok(seconds >= 1, `Retry-After ${seconds} >= 1`);
  return seconds;
}

// This file checks shared counting, not the outage path (redis-outage.test.ts runs that with the
// default command timeout). On a CPU-starved test machine a stall longer than the default 150 ms
// trips the limiter's circuit breaker — correctly, per instance limits from then on — which would
// make exact counts here depend on machine load. So the Redis instances get a generous timeout, and
// each test also checks that no instance fell back to local limits.
function configWithTimeout(ms: number): string {
  const config = parse(readFileSync(path.resolve(import.meta.dirname, '../../config/portico.yaml'), 'utf8'));
  config.redis = { ...config.redis, commandTimeoutMs: ms };
  const dir = tempDir('config');
  t.teardown(() => cleanup(dir));
  const file = path.join(dir, 'portico.yaml');
  writeFileSync(file, stringify(config));
  return file;
}

interface Mode {
  name: string;
  /** one instance (embedded) or two sharing a Redis */
  start(): Promise<Instance[]>;
}

const modes: Mode[] = [
  { name: 'embedded', start: async () => [await startPortico()] },
  {
    name: 'redis, two instances',
    start: async () => {
      const config = configWithTimeout(2000);
      const redis: RedisServer = await startRedis();
      const env = { PORTICO_REDIS_URL: redis.url, PORTICO_CONFIG: config };
      const started = await Promise.allSettled([startPortico(env), startPortico(env)]);
      const instances = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
      const failed = started.find((r) => r.status === 'rejected');
      if (failed) {
        // leave nothing running that would keep the test process alive
        for (const instance of instances) await instance.stop();
        await redis.stop();
        throw failed.reason;
      }
      const stop = instances.map((i) => i.stop);
      for (const [n, instance] of instances.entries()) {
        instance.stop = async () => {
          await stop[n]();
          if (n === instances.length - 1) await redis.stop();
        };
      }
      return instances;
    },
  },
];

for (const mode of modes) {
  t.test(mode.name, async (t) => {
    const instances = await mode.start();
    t.teardown(async () => {
      for (const instance of instances) await instance.stop();
    });
    const [a] = instances;
    /** a subtest that also checks that no instance fell back to per-instance limits meanwhile */
    const check = (name: string, body: (t: Test) => Promise<void>) =>
      t.test(name, async (t) => {
        await body(t);
        const fellBack = instances.flatMap((i) => i.logs.filter((line) => line.includes('Redis unreachable')));
        t.same(fellBack, [], 'the shared limiter stayed in force (no fallback to per-instance limits)');
      });
    const adminPort = a.ports.admin;
    /** the i-th call goes to instance i mod n: every count must hold across instances */
    const call = (i: number, key: string | null, options: Parameters<typeof api>[3] = {}) => {
      const instance = instances[i % instances.length];
      return api(instance.ports.https, instance.ca, key, { path: '/v1/categories', ...options });
    };

    check('Free 60, Pro 300, Business 1000: Remaining goes down by one, Reset ends the minute', async (t) => {
      await roomInMinute();
      for (const [plan, limit] of [['free', 60], ['pro', 300], ['business', 1000]] as const) {
        const { key } = await accountWithKey(adminPort, plan);
        for (let i = 0; i < 3; i++) {
          const answer = await call(i, key);
          t.equal(answer.status, 200);
          const h = rl(t, answer, `${plan} call ${i + 1}`);
          t.equal(h.limit, limit, `${plan}: X-RateLimit-Limit ${limit}`);
          t.equal(h.remaining, limit - 1 - i, `${plan}: X-RateLimit-Remaining ${limit - 1 - i}`);
          t.ok(Math.abs(h.reset - minuteEnd()) <= 1, `${plan}: X-RateLimit-Reset ${h.reset} is the end of this minute (${minuteEnd()})`);
        }
      }
    });

    check('Enterprise limits: exactly those; the minute is reported while it is the tighter window', async (t) => {
      await roomInMinute();
      const { key } = await accountWithKey(adminPort, 'enterprise', 'production', { perMinute: 7, perDay: 9 });
      for (let i = 0; i < 7; i++) {
        const answer = await call(i, key);
        t.equal(answer.status, 200, `call ${i + 1}`);
        const h = rl(t, answer);
        t.same([h.limit, h.remaining], [7, 6 - i], `call ${i + 1}: minute window 7, remaining ${6 - i}`);
        t.ok(Math.abs(h.reset - minuteEnd()) <= 1, 'Reset at the end of the minute');
      }
      const refused = await call(7, key);
      expectError(t, refused, 429, 'rate_limited');
      const h = rl(t, refused);
      t.same([h.limit, h.remaining], [7, 0], 'the exhausted window (the minute) is reported');
      t.ok(Math.abs(h.reset - minuteEnd()) <= 1, 'Reset at the end of the minute');
      t.ok(retryAfter(t, refused) <= 60, 'Retry-After within the minute');
    });

    check('the day window is reported when it is the tighter one, and enforced', async (t) => {
      await roomInMinute();
      const { key } = await accountWithKey(adminPort, 'enterprise', 'production', { perMinute: 50, perDay: 5 });
      for (let i = 0; i < 5; i++) {
        const h = rl(t, await call(i, key));
        t.same([h.limit, h.remaining], [5, 4 - i], `call ${i + 1}: day window 5, remaining ${4 - i}`);
        t.ok(Math.abs(h.reset - dayEnd()) <= 1, `Reset ${h.reset} at the next UTC midnight (${dayEnd()})`);
      }
      const refused = await call(5, key);
      expectError(t, refused, 429, 'rate_limited');
      const h = rl(t, refused);
      t.same([h.limit, h.remaining], [5, 0]);
      t.ok(Math.abs(h.reset - dayEnd()) <= 1, 'Reset at midnight UTC');
      const wait = retryAfter(t, refused);
      t.ok(Math.abs(wait - (dayEnd() - Date.now() / 1000)) <= 2, `Retry-After ${wait} lasts until midnight UTC`);

      // a tie goes to the longer window
      const tie = await accountWithKey(adminPort, 'enterprise', 'production', { perMinute: 4, perDay: 4 });
      const first = rl(t, await call(0, tie.key));
      t.same([first.limit, first.remaining], [4, 3]);
      t.ok(Math.abs(first.reset - dayEnd()) <= 1, 'tie: the day is reported');
    });

    check('a limit change mid-window applies at once and keeps the counts; the reported window switches', async (t) => {
      await roomInMinute();
      const { key, accountId } = await accountWithKey(adminPort, 'enterprise', 'production', { perMinute: 10, perDay: 100 });
      for (let i = 0; i < 4; i++) {
        const h = rl(t, await call(i, key));
        t.same([h.limit, h.remaining], [10, 9 - i], `call ${i + 1}: the minute`);
      }
      const patched = await admin(adminPort, 'PATCH', `/admin/accounts/${accountId}`, { limits: { perMinute: 10, perDay: 6 } });
      t.equal(patched.status, 200, patched.text);
      let h = rl(t, await call(4, key));
      t.same([h.limit, h.remaining], [6, 1], '5th call: 4 already counted on a 6-per-day window');
      t.ok(Math.abs(h.reset - dayEnd()) <= 1, 'the day window is now reported');
      h = rl(t, await call(5, key));
      t.same([h.limit, h.remaining], [6, 0]);
      const refused = await call(6, key);
      expectError(t, refused, 429, 'rate_limited');
      h = rl(t, refused);
      t.same([h.limit, h.remaining], [6, 0]);

      // a plan change: free → pro keeps the count
      const free = await accountWithKey(adminPort, 'free');
      for (let i = 0; i < 2; i++) t.equal(rl(t, await call(i, free.key)).remaining, 59 - i);
      t.equal((await admin(adminPort, 'PATCH', `/admin/accounts/${free.accountId}`, { plan: 'pro' })).status, 200);
      h = rl(t, await call(2, free.key));
      t.same([h.limit, h.remaining], [300, 297], 'pro limits at once, the two earlier calls still counted');
    });

    check('over the limit: 429 rate_limited, Retry-After, Remaining 0; refused calls consume nothing', async (t) => {
      await roomInMinute();
      const { key, accountId } = await accountWithKey(adminPort, 'enterprise', 'production', { perMinute: 5, perDay: 1000 });
      for (let i = 0; i < 5; i++) t.equal((await call(i, key)).status, 200, `call ${i + 1} passes`);
      for (let i = 0; i < 4; i++) {
        const refused = await call(i, key);
        expectError(t, refused, 429, 'rate_limited');
        const h = rl(t, refused);
        t.same([h.limit, h.remaining], [5, 0]);
        t.ok(retryAfter(t, refused) <= 60);
      }
      const patched = await admin(adminPort, 'PATCH', `/admin/accounts/${accountId}`, { limits: { perMinute: 10, perDay: 1000 } });
      t.equal(patched.status, 200, patched.text);
      t.match(patched.json, { id: accountId, plan: 'enterprise', limits: { perMinute: 10, perDay: 1000 } });
      for (let i = 0; i < 5; i++) {
        const answer = await call(i, key);
        t.equal(answer.status, 200, `after the raise, call ${6 + i} passes`);
        const h = rl(t, answer);
        t.same([h.limit, h.remaining], [10, 4 - i]);
      }
      const last = await call(5, key);
      expectError(t, last, 429, 'rate_limited');
      t.equal(rl(t, last).remaining, 0, 'exactly five more: the four refusals used nothing');
    });

    check('X-RateLimit-* on 200, 201, 400, 401, 404, 405, 413, 415, 429 — each call counted', async (t) => {
      await roomInMinute();
      const { key } = await accountWithKey(adminPort, 'pro');
      const json = { 'content-type': 'application/json' };
      const cases: Array<[number, string, Parameters<typeof api>[3]]> = [
        [200, 'GET /v1/categories', {}],
        [201, 'POST /v1/categories', { method: 'POST', json: { name: 'Limited' } }],
        [400, 'bad JSON', { method: 'POST', body: '{"name": ', headers: json }],
        [404, 'unknown category', { path: '/v1/categories/999999' }],
        [404, 'unknown path', { path: '/v1/nothing-here' }],
        [405, 'DELETE /v1/categories', { method: 'DELETE' }],
        [413, 'body over 64 KiB', { method: 'POST', body: JSON.stringify({ name: 'x', description: 'y'.repeat(70 * 1024) }), headers: json }],
        [415, 'no JSON content type', { method: 'POST', body: '{"name":"x"}', headers: { 'content-type': 'text/plain' } }],
      ];
      let expected = 299;
      for (const [i, [status, what, options]] of cases.entries()) {
        const answer = await call(i, key, options);
        t.equal(answer.status, status, `${what}: ${status}`);
        const h = rl(t, answer, what);
        t.same([h.limit, h.remaining], [300, expected], `${what}: counted (remaining ${expected})`);
        expected--;
      }

      // 401: no key, counted per client IP on the Free limits
      const anon1 = await call(0, null);
      expectError(t, anon1, 401, 'unauthorized');
      const first = rl(t, anon1, '401');
      t.equal(first.limit, 60, '401: the Free plan limit');
      t.ok(Math.abs(first.reset - minuteEnd()) <= 1);
      const anon2 = await call(1, null, { headers: { authorization: `Bearer pk_live_${'A'.repeat(43)}` } });
      expectError(t, anon2, 401, 'unauthorized');
      t.equal(rl(t, anon2, '401 unknown key').remaining, first.remaining - 1, 'the client IP is counted (one counter across instances)');

      // 429
      const tiny = await accountWithKey(adminPort, 'enterprise', 'production', { perMinute: 1, perDay: 10 });
      t.equal((await call(0, tiny.key)).status, 200);
      const refused = await call(1, tiny.key);
      expectError(t, refused, 429, 'rate_limited');
      t.same(Object.values(rl(t, refused, '429')).slice(0, 2), [1, 0]);
      retryAfter(t, refused);
    });

    check('a key that keeps calling while refused is banned: 429 key_banned, Retry-After ~900', async (t) => {
      await roomInMinute(15);
      const { key } = await accountWithKey(adminPort, 'enterprise', 'production', { perMinute: 2, perDay: 1000 });
      for (let i = 0; i < 2; i++) t.equal((await call(i, key)).status, 200);
      for (let i = 0; i < 10; i++) {
        const refused = await call(i, key);
        expectError(t, refused, 429, 'rate_limited');
        rl(t, refused, `refusal ${i + 1}`);
      }
      const banned = await call(10, key);
      expectError(t, banned, 429, 'key_banned');
      const wait = retryAfter(t, banned);
      t.ok(wait >= 895 && wait <= 900, `Retry-After ${wait} is the 15 minute ban`);
      const h = rl(t, banned, 'banned');
      t.equal(h.remaining, 0);
      // the ban holds on every instance and only counts down
      for (let i = 0; i < instances.length; i++) {
        const again = await call(i, key);
        expectError(t, again, 429, 'key_banned');
        const left = retryAfter(t, again);
        t.ok(left <= wait && left >= 890, `instance ${i}: Retry-After ${left} is the rest of the ban`);
        rl(t, again, `banned on instance ${i}`);
      }
    });

    check(`60 parallel requests at a 20-per-minute key: exactly 20 pass (${instances.length} instance${instances.length > 1 ? 's' : ''})`, async (t) => {
      await roomInMinute(10);
      const { key } = await accountWithKey(adminPort, 'enterprise', 'production', { perMinute: 20, perDay: 1000 });
      const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => call(i, key)));
      const passed = answers.filter((x) => x.status === 200);
      const refused = answers.filter((x) => x.status === 429);
      t.equal(passed.length, 20, 'exactly 20 × 200');
      t.equal(refused.length, 40, 'exactly 40 × 429');
      t.same(passed.map((x) => Number(x.headers['x-ratelimit-remaining'])).sort((x, y) => x - y), Array.from({ length: 20 }, (_, i) => i),
        'each allowed call saw its own count: Remaining 19 … 0, once each');
      // the 40 refusals: more than 10 within 60 s bans the key, on every instance alike
      t.equal(refused.filter((x) => x.json?.code === 'rate_limited').length, 10, '10 × rate_limited');
      t.equal(refused.filter((x) => x.json?.code === 'key_banned').length, 30, 'then 30 × key_banned');
      for (const answer of answers) rl(t, answer, `parallel ${answer.status}`);
    });
  });
}
