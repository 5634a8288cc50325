// Unit test of the worker's side of the instance limiter (src/ratelimit/instance-limiter.ts): pure logic,
// so the IPC channel is an in-process EventEmitter whose "primary" answers with answerLimiterRequest
// (one MemoryLimiter for every worker), messages copied through JSON as the cluster's channel does. The real channel, with `portico serve --workers 2` and a
// frozen redis-server, is test/ratelimit/outage-workers.test.ts.
import t from 'tap';
import type { Worker } from 'node:cluster';
import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { answerLimiterRequest, InstanceLimiter, type LimiterRequest, type LimiterResponse, type PrimaryChannel } from '../../src/ratelimit/instance-limiter.ts';
import type { Decision } from '../../src/ratelimit/limiter.ts';
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
    const worker = {
      isConnected: () => true,
      send: (response: LimiterResponse) => this.emit('message', JSON.parse(JSON.stringify(response))),
    } as unknown as Worker;
    answerLimiterRequest(worker, this.#primary, JSON.parse(JSON.stringify(message)) as LimiterRequest);
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

// Redis's last decision for the subject (FailoverLimiter's `known`) goes with the call: the primary, and a
// worker deciding by itself, count on from it rather than from 0 (README "Redis outages").
t.test("a worker's last decision from Redis travels with its call", async (t) => {
  const now = Date.parse('2025-03-10T12:00:20Z');
  const twenty = { perMinute: 20, perDay: 1000 };
  const known = (remaining: number): Decision => ({ allowed: true, reason: 'ok', limit: 20, remaining, reset: Date.parse('2025-03-10T12:01:00Z') / 1000, retryAfter: 0 });
  const allowed = (decisions: Decision[]) => decisions.filter((d) => d.allowed).length;

  // worker one last heard 15 of 20 used this minute, worker two 12: the primary takes the higher count
  const primary = new MemoryLimiter();
  const one = new InstanceLimiter(new MemoryLimiter(), 60_000, new Channel(primary));
  const two = new InstanceLimiter(new MemoryLimiter(), 60_000, new Channel(primary));
  const both = await Promise.all(Array.from({ length: 20 }, (_, i) => (i < 10 ? one.consume('acct:production', twenty, ban, now, known(5)) : two.consume('acct:production', twenty, ban, now, known(8)))));
  t.equal(allowed(both), 5, `5 of 20 allowed over both workers: ${allowed(both)}`);
  await one.close();
  await two.close();

  // a primary that does not answer: the worker's own limiter counts on from the same decision
  const channel = new Channel();
  channel.answering = false;
  const stuck = new InstanceLimiter(new MemoryLimiter(), 150, channel);
  const alone = await Promise.all(Array.from({ length: 10 }, () => stuck.consume('acct:production', twenty, ban, now, known(5))));
  t.equal(channel.sent.length, 1, 'sent, then decided here after the timeout');
  t.equal(allowed(alone), 5, `5 of 10 allowed by the worker itself: ${allowed(alone)}`);
  await stuck.close();

  // one process, no cluster
  const single = new InstanceLimiter(new MemoryLimiter(), 60_000, null);
  const own = await Promise.all(Array.from({ length: 10 }, () => single.consume('acct:production', twenty, ban, now, known(5))));
  t.equal(allowed(own), 5, `5 of 10 allowed in one process: ${allowed(own)}`);
  await single.close();
});
