// Session ticket keys on a real redis-server: every instance takes the key of the current period
// from Redis, and one that applied a key which then vanished (a failover that lost it before it
// reached a replica) takes up the key another instance made in its place at its next check.
import t, { type Test } from 'tap';
import { Redis } from 'ioredis';
import { randomBytes } from 'node:crypto';
import { redisTicketKeys, rotateTicketKeys } from '../../src/certs/ticket-keys.ts';
import { startRedis } from '../helpers/redis.ts';

const server = await startRedis();
t.teardown(() => server.stop());
const client = new Redis(server.url);
t.teardown(() => client.disconnect());
const PERIOD_SECONDS = 12 * 3600;
const name = () => `portico:tls-ticket-key:${Math.floor(Date.now() / 1000 / PERIOD_SECONDS)}`;

/** an instance's rotation, checking every 50 ms: the keys it applied, in order */
function instance(t: Test) {
  const applied: string[] = [];
  const errors: unknown[] = [];
  const stop = rotateTicketKeys(redisTicketKeys(client, PERIOD_SECONDS), PERIOD_SECONDS, (key) => applied.push(key.toString('base64')), (err) => errors.push(err), Date.now, 50);
  t.teardown(stop);
  return { applied, errors };
}

const until = async (check: () => boolean, ms = 3000) => {
  for (const deadline = Date.now() + ms; !check() && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 10));
};

t.test('two instances share one key; a key lost in a failover is replaced by the one made in its place', async (t) => {
  await client.flushall();
  const a = instance(t);
  const b = instance(t);
  await until(() => a.applied.length > 0 && b.applied.length > 0);
  t.equal(a.applied.length, 1, 'A applied a key');
  t.same(b.applied, a.applied, 'B applied the same one');
  t.equal(await client.get(name()), a.applied[0], 'the one in Redis');

  await new Promise((r) => setTimeout(r, 200));
  t.equal(a.applied.length, 1, 'checks that find the same key apply nothing again');

  // the failover: the key is gone from the promoted replica, and another instance made a new one
  const replacement = randomBytes(48).toString('base64');
  await client.set(name(), replacement);
  await until(() => a.applied.length > 1 && b.applied.length > 1);
  t.same(a.applied, [b.applied[0], replacement], 'A took up the key made in its place');
  t.same(b.applied, a.applied, 'and so did B');
  t.same([...a.errors, ...b.errors], [], 'no errors');
});

t.test('Redis gone: the key applied stays and the failure is reported once', async (t) => {
  await client.flushall();
  const errors: unknown[] = [];
  const applied: string[] = [];
  const lost = new Redis(server.url, { maxRetriesPerRequest: 0, enableOfflineQueue: false });
  t.teardown(() => lost.disconnect());
  await new Promise((r) => lost.once('ready', r));
  const stop = rotateTicketKeys(redisTicketKeys(lost, PERIOD_SECONDS), PERIOD_SECONDS, (key) => applied.push(key.toString('base64')), (err) => errors.push(err), Date.now, 50);
  t.teardown(stop);
  await until(() => applied.length > 0);
  lost.disconnect();
  await until(() => errors.length > 0);
  await new Promise((r) => setTimeout(r, 300));
  t.equal(applied.length, 1, 'the key applied stays in use');
  t.equal(errors.length, 1, 'the failing checks are reported once');
  t.match(errors[0], { code: 'STATE_UNAVAILABLE' }, 'as STATE_UNAVAILABLE');
});
