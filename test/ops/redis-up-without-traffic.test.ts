// Regression: with Redis frozen (SIGSTOP) and no /v1 request, portico_redis_up stayed 1 and neither
// "Redis unreachable" nor "Redis is back" was logged, while /readyz said degraded: the gauge moved only
// on the connection's events (a frozen server keeps its connection) or when a limiter call failed. A
// PING of the state every second now drives the gauge, the lines and /readyz alike. A real
// redis-server, frozen and resumed; a real Portico; no /v1 request at all.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { startPortico } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';
import { startRedis } from '../helpers/redis.ts';
import { scrape } from '../helpers/prometheus.ts';

t.test('portico_redis_up and the Redis lines follow a frozen Redis without /v1 traffic, in step with /readyz', async (t) => {
  const redis = await startRedis();
  const portico = await startPortico({ PORTICO_REDIS_URL: redis.url, PORTICO_REDIS_COMMAND_TIMEOUT_MS: '300' });
  const pid = redis.process.pid!;
  t.teardown(async () => {
    if (redis.process.exitCode === null && redis.process.signalCode === null) redis.process.kill('SIGCONT');
    await portico.stop();
    await redis.stop();
  });
  const redisUp = async () => /^portico_redis_up (\d+)/m.exec(await scrape(portico.ports.admin))?.[1];
  const lines = (text: string) => portico.logs.filter((line) => line.includes(text)).length;
  const readyz = () => admin(portico.ports.admin, 'GET', '/readyz', undefined, null);
  /** polls the gauge alone (no /readyz, no /v1) until it reads `want` */
  const gaugeBecomes = async (want: string, ms: number) => {
    const started = performance.now();
    let seen: string | undefined;
    while ((seen = await redisUp()) !== want && performance.now() - started < ms) await sleep(100);
    return { seen, after: performance.now() - started };
  };

  t.equal(await redisUp(), '1', 'up at start');
  t.match((await readyz()).json, { redis: 'ok' });

  process.kill(pid, 'SIGSTOP');
  const down = await gaugeBecomes('0', 4000);
  t.equal(down.seen, '0', `portico_redis_up 0 ${down.after.toFixed(0)} ms after the freeze, without /v1 or /readyz requests`);
  t.equal(lines('Redis unreachable'), 1, 'one "Redis unreachable" line');
  const frozen = await readyz();
  t.equal(frozen.status, 200);
  t.match(frozen.json, { redis: 'degraded' }, '/readyz agrees');
  t.equal(await redisUp(), '0', 'and the gauge still does after /readyz');

  process.kill(pid, 'SIGCONT');
  const up = await gaugeBecomes('1', 4000);
  t.equal(up.seen, '1', `portico_redis_up 1 again ${up.after.toFixed(0)} ms after SIGCONT, without /v1 or /readyz requests`);
  t.equal(lines('Redis is back'), 1, 'one "Redis is back" line');
  t.match((await readyz()).json, { redis: 'ok' }, '/readyz agrees');
  await sleep(1500);
  t.equal(lines('Redis unreachable') + lines('Redis is back'), 2, 'no more lines while Redis answers');
});
