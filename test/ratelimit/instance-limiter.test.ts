// Unit test of the worker's side of the instance limiter (src/ratelimit/instance-limiter.ts): pure logic,
// so the IPC channel is an in-process EventEmitter whose "primary" answers with answerLimiterRequest's
// rules (one MemoryLimiter for every worker). The real channel, with `portico serve --workers 2` and a
// frozen redis-server, is test/ratelimit/outage-workers.test.ts.
import t from 'tap';
import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { InstanceLimiter, LIMITER_RESPONSE, type LimiterRequest, type LimiterResponse, type PrimaryChannel } from '../../src/ratelimit/instance-limiter.ts';
import { MemoryLimiter } from '../../src/ratelimit/memory-limiter.ts';

const limit = { perMinute: 3, perDay: 1000 };
const ban = { refusals: 1000, windowSeconds: 60, banSeconds: 60 };

class Channel extends EventEmitter implements PrimaryChannel {
  connected = true;
  sent: LimiterRequest[] = [];
  /** false: the primary never answers */
  answering = true;
  #primary: MemoryLimiter;

  /** `primary`: the primary's one limiter, shared by every worker's channel */
  constructor(primary = new MemoryLimiter()) {
    super();
    this.#primary = primary;
  }

  send(message: LimiterRequest, callback: (err: Error | null) => void): boolean {
    this.sent.push(message);
    setImmediate(() => callback(null));
    if (!this.answering) return true;
    Promise.all(message.calls.map(async (call) => ({ id: call.id, decision: await this.#primary.consume(call.subject, call.limit, call.ban, call.nowMs) }))).then((decisions) =>
      this.emit('message', { type: LIMITER_RESPONSE, decisions } satisfies LimiterResponse),
    );
    return true;
  }
}

// The limiter's timeouts, told apart from every other timer by their length: set and not cleared.
const TIMEOUT_MS = 43_210;
const live = new Set<unknown>();
const realSetTimeout = globalThis.setTimeout;
const realClearTimeout = globalThis.clearTimeout;
globalThis.setTimeout = ((fn: () => void, ms?: number) => {
  const timer = realSetTimeout(fn, ms);
  if (ms === TIMEOUT_MS) live.add(timer);
  return timer;
}) as typeof setTimeout;
globalThis.clearTimeout = ((timer?: ReturnType<typeof setTimeout>) => {
  live.delete(timer);
  realClearTimeout(timer);
}) as typeof clearTimeout;
t.teardown(() => {
  globalThis.setTimeout = realSetTimeout;
  globalThis.clearTimeout = realClearTimeout;
});
const timers = () => live.size;

t.test('two workers share the primary: the limit holds for both together', async (t) => {
  const primary = new MemoryLimiter();
  const channels = [new Channel(primary), new Channel(primary)];
  const one = new InstanceLimiter(new MemoryLimiter(), 60_000, channels[0]);
  const two = new InstanceLimiter(new MemoryLimiter(), 60_000, channels[1]);
  const decisions = await Promise.all([1, 2, 3, 4, 5].map((i) => (i % 2 ? one : two).consume('acct:production', limit, ban)));
  t.equal(decisions.filter((d) => d.allowed).length, 3, 'three of five allowed, not three per worker');
  t.same(channels.map((c) => c.sent.length), [1, 1], "each worker's calls of one turn travel as one message");
  await one.close();
  await two.close();
});

t.test('an answered message leaves no timer behind', async (t) => {
  const channel = new Channel();
  const limiter = new InstanceLimiter(new MemoryLimiter(), TIMEOUT_MS, channel);
  const before = timers();
  for (let turn = 0; turn < 20; turn++) await Promise.all([limiter.consume(`s${turn}`, limit, ban), limiter.consume(`s${turn}`, limit, ban)]);
  t.equal(channel.sent.length, 20, 'twenty messages answered');
  t.equal(timers(), before, "no timeout is left running once the primary has answered (each would run out the command timeout)");
  await limiter.close();
});

t.test('a primary that does not answer: decided here after the timeout, and here at once for the timeout that follows', async (t) => {
  const channel = new Channel();
  channel.answering = false;
  const limiter = new InstanceLimiter(new MemoryLimiter(), 150, channel);
  const started = performance.now();
  const first = await limiter.consume('acct:production', limit, ban);
  const waited = performance.now() - started;
  t.ok(first.allowed, "decided by the worker's own limiter");
  t.ok(waited >= 140, `after the timeout (${Math.round(waited)} ms)`);
  await limiter.consume('acct:production', limit, ban);
  t.equal(channel.sent.length, 1, 'the next call is not sent to the stuck primary to wait again');
  await sleep(160);
  channel.answering = true;
  await limiter.consume('acct:production', limit, ban);
  t.equal(channel.sent.length, 2, 'after the timeout, the primary is asked again');
  await limiter.close();
});

t.test('close decides what is waiting and clears its timers', async (t) => {
  const channel = new Channel();
  channel.answering = false;
  const limiter = new InstanceLimiter(new MemoryLimiter(), TIMEOUT_MS, channel);
  const before = timers();
  const pending = limiter.consume('acct:production', limit, ban);
  await sleep(5);
  t.equal(timers(), before + 1, 'one timeout for the message sent');
  await limiter.close();
  t.ok((await pending).allowed, 'the waiting call is decided here');
  t.equal(timers(), before, 'its timeout is cleared');
});

t.test('a closed channel: decided here, nothing sent', async (t) => {
  const channel = new Channel();
  channel.connected = false;
  const limiter = new InstanceLimiter(new MemoryLimiter(), 60_000, channel);
  t.ok((await limiter.consume('acct:production', limit, ban)).allowed);
  t.equal(channel.sent.length, 0);
  await limiter.close();
});
