// Regression, two faults around a domain that waits in the queue for its own limit (here: failed
// validations for its hostname), with room left in the account's order budget:
// - every other domain's order first joined the queue behind it, with a `certificate_queued` "place 2
//   … other domains are waiting" event, and was then ordered within the same second: the queue now
//   holds an order back only when it would take what the queue waits for (the account's budget);
// - Re-verify on the queued domain erased its nextAttemptAt while it stayed queued (a queued domain
//   shows queuePosition and nextAttemptAt): a CA limit is not a backoff, and its turn is kept.
// Real pebble, injected clock.
import t from 'tap';
import { startManagerBed } from '../helpers/cert-manager.ts';

t.test('a domain waiting on its own limit holds nobody back, and keeps its turn on Re-verify', async (t) => {
  const bed = await startManagerBed({ limits: { failedValidationsPerHour: 1, newOrdersPer3h: 50 } });
  t.teardown(() => bed.stop());
  const { manager, stores, pebble, dns } = bed;
  const broken = 'broken.example.org';
  await bed.addVerified(broken);
  // the CA's validation lands where nothing answers: one failed validation, then its limit
  await dns.clearA(broken);
  await dns.addA(broken, ['127.0.0.2']);
  await manager.obtain(broken, 'verified');
  await manager.obtain(broken, 'retry');
  t.equal(pebble.orders(), 1);
  const waiting = (await stores.domains.get(broken))!.certificate;
  t.match(waiting, { status: 'queued', queuePosition: 1, nextAttemptAt: String }, 'queued for its own limit');

  // Re-verify (its DNS check passed): the backoff goes, the place and the turn stay
  manager.onVerified((await stores.domains.get(broken))!, 'reverify');
  await manager.idle();
  // the reset is not awaited by idle() without the fix: give it the time it takes
  await new Promise((r) => setTimeout(r, 500));
  const after = (await stores.domains.get(broken))!.certificate;
  t.match(after, { status: 'queued', queuePosition: 1, failures: 0 }, 'still in line, backoff reset');
  t.equal(after.nextAttemptAt, waiting.nextAttemptAt, 'nextAttemptAt kept');
  t.equal(pebble.orders(), 1, 'nothing sent to the CA');

  // another domain: its order goes at once, without joining the line
  const fine = 'fine.example.org';
  await bed.addVerified(fine);
  const got = await manager.obtain(fine, 'verified');
  t.ok(got, 'the certificate comes from the call itself, not from a queue run after it');
  t.equal(pebble.orders(), 2);
  const events = (await stores.domains.events(fine)).map((e) => e.type);
  t.notOk(events.includes('certificate_queued'), `no certificate_queued on its timeline (${events.join(', ')})`);
  t.equal((await stores.domains.get(fine))!.certificate.queuePosition, undefined);
  t.match((await stores.domains.get(broken))!.certificate, { status: 'queued', queuePosition: 1, nextAttemptAt: waiting.nextAttemptAt }, 'the waiting one is as it was');
  manager.stop();
  await manager.idle();
});
