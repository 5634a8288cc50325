// The one scheduler and its stored due times (src/state/schedule.ts) in both backends: due jobs only,
// durable across a restart, a move wins over the old time, and on one Redis two instances run each
// job once.
import t, { type Test } from 'tap';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { Redis } from 'ioredis';
import { openEmbeddedSchedule } from '../../src/state/embedded-schedule.ts';
import { openRedisSchedule } from '../../src/state/redis-schedule.ts';
import type { ScheduleStore, ScheduledJob } from '../../src/state/schedule.ts';
import { createScheduler } from '../../src/domains/scheduler.ts';
import { createLogger } from '../../src/log.ts';
import { cleanup, tempDir } from '../helpers/portico.ts';
import { startRedis } from '../helpers/redis.ts';

const HOUR = 3_600_000;
const T0 = Date.parse('2026-03-01T10:15:00Z');
const server = await startRedis();
t.teardown(() => server.stop());
const clients: Redis[] = [];
t.teardown(() => clients.forEach((c) => c.disconnect()));
const redis = () => {
  const client = new Redis(server.url, { maxRetriesPerRequest: 1 });
  client.on('error', () => undefined);
  clients.push(client);
  return client;
};
const plainCall = <T>(run: () => Promise<T>) => run();
const clock = { ms: T0 };
const now = () => clock.ms;

const backends: Array<{ name: string; open(t: Test): Promise<{ store: ScheduleStore; again(): ScheduleStore; dir?: string }> }> = [
  {
    name: 'embedded',
    async open(t) {
      const dir = tempDir('schedule');
      t.teardown(() => cleanup(dir));
      return { store: openEmbeddedSchedule(dir), again: () => openEmbeddedSchedule(dir), dir };
    },
  },
  {
    name: 'redis',
    async open() {
      await redis().flushall();
      return { store: openRedisSchedule(redis(), plainCall), again: () => openRedisSchedule(redis(), plainCall) };
    },
  },
];

for (const backend of backends) {
  t.test(backend.name, async (t) => {
    t.test('claims only what is due, oldest first; a move wins; due times survive a restart', async (t) => {
      clock.ms = T0;
      const { store, again, dir } = await backend.open(t);
      t.equal(await store.earliest(), null);
      t.same(await store.claim(T0, 10, 60_000), [], 'a scheduler\'s first pass: nothing yet');
      await store.set('domain-check', 'a.example.com', T0 + 1000);
      await store.set('domain-check', 'b.example.com', T0 + 500);
      await store.set('domain-check', 'c.example.com', T0 + 2 * HOUR);
      await store.set('domain-check', 'a.example.com', T0 + 3 * HOUR);
      t.same(await store.claim(T0, 10, 60_000), [], 'nothing is due yet');
      t.equal(await store.earliest(), T0 + 500);
      clock.ms = T0 + 1500;
      t.same(await store.claim(clock.ms, 10, 60_000), [{ kind: 'domain-check', key: 'b.example.com', dueAt: T0 + 500 }], 'a moved on: only b is due');
      t.same(await store.claim(clock.ms, 10, 60_000), [], 'a claimed job is not handed out twice');
      await store.set('domain-check', 'b.example.com', T0 + HOUR);

      const reopened = again();
      clock.ms = T0 + 2 * HOUR + 1;
      const due = (await reopened.claim(clock.ms, 10, 60_000)).map((j) => j.key);
      t.same(due, ['b.example.com', 'c.example.com'], 'after a restart: b at its new time, then c');
      for (const job of await Promise.resolve([{ kind: 'domain-check', key: 'b.example.com', dueAt: T0 + HOUR }, { kind: 'domain-check', key: 'c.example.com', dueAt: T0 + 2 * HOUR }])) await reopened.finish(job);
      clock.ms = T0 + 4 * HOUR;
      const later = await reopened.claim(clock.ms, 10, 60_000);
      // embedded may hand out a's old line too (at least once); a's current time must be there
      t.ok(later.some((j) => j.key === 'a.example.com' && j.dueAt === T0 + 3 * HOUR), 'a at its moved time');
      t.notOk(later.some((j) => j.key !== 'a.example.com'), 'finished jobs stay finished');
      for (const job of later) await reopened.finish(job);
      if (dir) {
        clock.ms = T0 + 5 * HOUR;
        await reopened.claim(clock.ms, 10, 60_000);
        t.same(readdirSync(path.join(dir, 'schedule')), [], 'hours whose jobs are all done are deleted');
      }
      t.equal(await reopened.earliest(), null);
    });

    t.test('setMany moves many at once; a mark is kept across a restart', async (t) => {
      clock.ms = T0;
      const { store, again } = await backend.open(t);
      await store.claim(T0, 10, 60_000);
      const jobs = Array.from({ length: 2500 }, (_, i) => ({ kind: 'domain-check', key: `d${i}.example.com`, dueAt: T0 + (i % 50) * 60_000 + 1 }));
      await store.setMany(jobs);
      await store.setMany([{ kind: 'domain-check', key: 'd0.example.com', dueAt: T0 + 10 * HOUR }]);
      t.notOk(await store.marked('seeded'));
      await store.mark('seeded');
      const reopened = again();
      t.ok(await reopened.marked('seeded'));
      clock.ms = T0 + 2 * HOUR;
      const due = await reopened.claim(clock.ms, 5000, 60_000);
      t.equal(due.length, 2499, 'every job but the moved one');
      t.notOk(due.some((j) => j.key === 'd0.example.com'));
    });

    t.test('the scheduler runs a handler at its due time and stores the time it answers', async (t) => {
      clock.ms = T0;
      const { store } = await backend.open(t);
      const scheduler = createScheduler({ store, log: createLogger('silent'), now });
      const ran: string[] = [];
      scheduler.register('tick', async (job: ScheduledJob) => {
        ran.push(`${job.key}@${job.dueAt - T0}`);
        return job.key === 'once' ? null : job.dueAt + 1000;
      });
      t.throws(() => scheduler.register('tick', async () => null), /has a handler already/);
      await scheduler.at('tick', 'once', T0 + 10);
      await scheduler.at('tick', 'every', T0 + 20);
      t.equal(await scheduler.runDue(), 0);
      clock.ms = T0 + 30;
      t.equal(await scheduler.runDue(), 2);
      clock.ms = T0 + 1020;
      t.equal(await scheduler.runDue(), 1);
      t.same(ran.sort(), ['every@1020', 'every@20', 'once@10']);
      t.equal(await store.earliest(), T0 + 2020);
    });
  });
}

t.test('two instances on one Redis: each due job runs once', async (t) => {
  await redis().flushall();
  clock.ms = T0;
  const runs = new Map<string, number>();
  const schedulers = [0, 1].map(() => {
    const scheduler = createScheduler({ store: openRedisSchedule(redis(), plainCall), log: createLogger('silent'), now, batch: 7 });
    scheduler.register('domain-check', async (job) => {
      runs.set(job.key, (runs.get(job.key) ?? 0) + 1);
      await new Promise((r) => setTimeout(r, Math.random() * 3));
      return null;
    });
    return scheduler;
  });
  for (let i = 0; i < 200; i++) await schedulers[i % 2].at('domain-check', `d${i}.example.com`, T0 + i);
  clock.ms = T0 + 1000;
  const counts = await Promise.all(schedulers.map((s) => s.runDue()));
  t.equal(counts[0] + counts[1], 200, 'every job ran');
  t.ok(counts[0] > 0 && counts[1] > 0, `both instances took part (${counts.join(' + ')})`);
  t.same([...runs.values()].filter((n) => n !== 1), [], 'none ran twice');
  t.equal(runs.size, 200);
});
