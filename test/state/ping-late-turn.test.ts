// Regression: the PING of the state (what portico_redis_up, the "Redis unreachable" / "Redis is back"
// lines and /readyz follow) timed out when the event loop was held past its deadline, though Redis had
// answered in time: in a late turn timers run before the poll phase reads the answer already waiting.
// Under a burst of /v1 requests on a busy machine an instance logged "Redis unreachable" and "Redis is
// back" while the limiter kept counting in Redis. The deadline is now checked after the turn's reads.
// A real redis-server; the loop is held by a busy wait, as a burst holds it.
import t from 'tap';
import { connectRedis } from '../../src/state/redis.ts';
import { startRedis } from '../helpers/redis.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const COMMAND_TIMEOUT_MS = 150;

/** holds the event loop for `ms`, as a turn full of requests does */
function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

t.test('a PING answered in time counts as answered however late the turn that reads it', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const connections = connectRedis(redis.url, { commandTimeoutMs: COMMAND_TIMEOUT_MS });
  t.teardown(() => {
    connections.subscriber.disconnect();
    connections.client.disconnect();
  });
  for (let i = 0; i < 100 && !(await connections.pingState().then(() => true, () => false)); i++) await sleep(50);

  const outcomes: string[] = [];
  for (let round = 0; round < 5; round++) {
    const ping = connections.pingState().then(() => 'answered', (err: Error) => err.message);
    // Redis answers within a millisecond; this process reads it only after twice the deadline
    busy(2 * COMMAND_TIMEOUT_MS);
    outcomes.push(await ping);
  }
  t.same(outcomes, ['answered', 'answered', 'answered', 'answered', 'answered'], 'never taken for a timeout');
  t.notOk(connections.justTimedOut(), 'and no state call is refused as if Redis had frozen');

  // a Redis that really does not answer still times out, after the deadline
  process.kill(redis.process.pid!, 'SIGSTOP');
  t.teardown(() => {
    try {
      process.kill(redis.process.pid!, 'SIGCONT');
    } catch {
      // gone
    }
  });
  const started = performance.now();
  const frozen = await connections.pingState().then(() => 'answered', (err: Error) => err.message);
  const waited = performance.now() - started;
  t.match(frozen, /timed out/, 'a frozen Redis: timed out');
  t.ok(waited >= COMMAND_TIMEOUT_MS - 5, `not before the deadline (${Math.round(waited)} ms)`);
});
