// A failed first order is tried again by the scheduler's cert-retry job when its backoff ends — a
// stored due time, so a restart does not forget it — and not before.
import t from 'tap';
import { createScheduler } from '../../src/domains/scheduler.ts';
import { createLogger } from '../../src/log.ts';
import { startManagerBed } from '../helpers/cert-manager.ts';

t.test('failed → retried from the schedule once the backoff ends', async (t) => {
  const bed = await startManagerBed();
  t.teardown(() => bed.stop());
  const { manager, stores, pebble, dns, clock } = bed;
  const scheduler = createScheduler({ store: stores.schedule, log: createLogger('silent'), now: () => clock.ms });
  manager.useScheduler(scheduler);
  await bed.addVerified('later.example.org');
  await dns.clearA('later.example.org');
  await dns.addA('later.example.org', ['127.0.0.2']);
  await manager.obtain('later.example.org', 'verified');
  await manager.idle();
  const failed = (await stores.domains.get('later.example.org'))!.certificate;
  t.match(failed, { status: 'failed', nextAttemptAt: String });
  t.equal(await stores.schedule.earliest() !== null, true, 'the next try is a stored due time');
  await dns.clearA('later.example.org');
  await dns.addA('later.example.org', ['127.0.0.1']);
  clock.ms += 30_000;
  await scheduler.runDue();
  t.equal(pebble.orders(), 1, 'not before the backoff ends');
  clock.ms += 31_000;
  await scheduler.runDue();
  t.equal(pebble.orders(), 2, 'tried again after it');
  t.equal((await stores.domains.get('later.example.org'))!.certificate.status, 'issued');
});
