// Automatic DNS checks over weeks, on an injected clock instead of waiting: the pending backoff
// (PORTICO_PENDING_RECHECK_MS doubling to 6 h), `verification_expired` after 30 days, Re-verify
// starting the cycle again, and a verified domain's daily checks (three failures → misconfigured).
// Real DNS (challtestsrv), real embedded state and scheduler.
import t from 'tap';
import type { Domain } from '../../src/state/types.ts';
import { startChecksBed } from '../helpers/checks-bed.ts';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
const T0 = Date.parse('2026-03-01T10:00:00Z');
const verified: string[] = [];
const { dns, stores, clock, now, scheduler, checks } = await startChecksBed(t, 'rechecks', { onVerified: (domain) => verified.push(domain.hostname) });

async function add(hostname: string): Promise<Domain> {
  const at = new Date(now()).toISOString();
  const domain: Domain = {
    hostname, projectId: 'prj_1', accountId: 'acc_1', primary: false, status: 'pending', apex: false, records: [], diagnostics: [], certificate: { status: 'none' },
    createdAt: at, nextCheckAt: new Date(now() + MINUTE).toISOString(), recheck: { since: at, attempts: 0, failuresInRow: 0 },
  };
  await stores.domains.create(domain);
  await checks.scheduleFirst(domain);
  return domain;
}

/** moves the clock to the next due time and runs what is due; the time it ran at, or null when nothing is scheduled */
async function nextCheck(hostname?: string): Promise<number | null> {
  const before = hostname ? (await stores.domains.get(hostname))?.lastCheckedAt : undefined;
  // earliest() may name the start of an hour not read yet (embedded): a pass there reads it
  for (;;) {
    const due = await stores.schedule.earliest();
    if (due === null) return null;
    clock.ms = Math.max(clock.ms, due);
    const ran = await scheduler.runDue();
    if (ran > 0 && (!hostname || (await stores.domains.get(hostname))?.lastCheckedAt !== before)) return clock.ms;
  }
}

t.test('pending: waits double from 1 minute to 6 hours; after 30 days verification_expired and the checks stop', async (t) => {
  await add('never.example.com');
  const times: number[] = [T0];
  for (let i = 0; i < 200; i++) {
    const at = await nextCheck();
    if (at === null) break;
    times.push(at);
  }
  const waits = times.slice(1).map((at, i) => (at - times[i]) / MINUTE);
  t.same(waits.slice(0, 11), [1, 2, 4, 8, 16, 32, 64, 128, 256, 360, 360], 'minutes between checks');
  t.ok(waits.slice(9).every((w) => w === 360), 'then every 6 hours');
  const domain = (await stores.domains.get('never.example.com'))!;
  t.equal(domain.status, 'failed');
  t.match(domain.diagnostics.at(-1), { code: 'verification_expired' });
  t.ok(now() - T0 >= 30 * DAY && now() - T0 < 30 * DAY + 6 * HOUR, 'expired at 30 days, at the first check past them');
  t.equal(domain.nextCheckAt, undefined, 'no next check');
  t.equal(await stores.schedule.earliest(), null, 'nothing left scheduled');
  const events = await stores.domains.events('never.example.com');
  t.equal(events.at(-1)?.type, 'verification_failed');
  t.equal(events.filter((e) => e.type === 'dns_checked').length, 1, `the first check says what it found; ${times.length - 2} more finding the same add nothing`);
  t.equal(domain.lastCheckedAt, new Date(now()).toISOString(), 'each check is still recorded on the domain');

  // Re-verify starts the cycle again: a minute, then two …
  await checks.run(domain, 'reverify');
  const again = (await stores.domains.get('never.example.com'))!;
  t.equal(again.status, 'pending');
  t.equal(Date.parse(again.nextCheckAt!) - now(), MINUTE);
  await dns.setCname('never.example.com', 'edge.localhost');
  const start = now();
  await nextCheck();
  t.equal(now() - start, MINUTE);
  t.match(await stores.domains.get('never.example.com'), { status: 'verified', health: 'ok', diagnostics: [] }, 'records found: verified by itself');
  t.same(verified, ['never.example.com'], 'the certificate side heard of it');
});

t.test('verified: checked daily; three failures in a row → misconfigured; a pass → ok', async (t) => {
  // its stale due time may still come up (at least once): removed, it is dropped then
  await stores.domains.remove('never.example.com', new Date(now()).toISOString());
  clock.ms = T0 + 60 * DAY;
  await dns.setCname('daily.example.com', 'edge.localhost');
  await add('daily.example.com');
  await nextCheck('daily.example.com');
  t.equal((await stores.domains.get('daily.example.com'))!.status, 'verified');
  await dns.clearCname('daily.example.com');
  await dns.setCname('daily.example.com', 'parked.example.net');
  const seen: Array<string | undefined> = [];
  for (let i = 0; i < 3; i++) {
    const before = now();
    await nextCheck('daily.example.com');
    t.equal(now() - before, DAY, 'a day later');
    seen.push((await stores.domains.get('daily.example.com'))!.health);
  }
  t.same(seen, ['ok', 'ok', 'misconfigured']);
  const domain = (await stores.domains.get('daily.example.com'))!;
  t.match(domain, { status: 'verified', diagnostics: [{ code: 'cname_mismatch' }] }, 'still verified, with the reason');
  await dns.clearCname('daily.example.com');
  await dns.setCname('daily.example.com', 'edge.localhost');
  await nextCheck('daily.example.com');
  t.match(await stores.domains.get('daily.example.com'), { health: 'ok', diagnostics: [] });
  t.same((await stores.domains.events('daily.example.com')).map((e) => e.type).filter((type) => type !== 'dns_checked'), ['verified', 'misconfigured', 'recovered']);
  const checked = (await stores.domains.events('daily.example.com')).filter((e) => e.type === 'dns_checked').length;
  await nextCheck('daily.example.com');
  t.equal((await stores.domains.events('daily.example.com')).filter((e) => e.type === 'dns_checked').length, checked, 'a routine check of a healthy domain adds no event');
  t.equal((await stores.domains.get('daily.example.com'))!.lastCheckedAt, new Date(now()).toISOString(), 'but it is recorded');
});

t.test('domains stored before automatic checks existed get their first check, once', async (t) => {
  clock.ms = T0 + 90 * DAY;
  await dns.setCname('old.example.com', 'edge.localhost');
  const at = new Date(now()).toISOString();
  await stores.projects.create({ id: 'prj_1', accountId: 'acc_1', name: 'legacy', upstream: 'http://127.0.0.1:9', createdAt: at });
  // as an older version stored them: no nextCheckAt, no recheck state
  for (const [hostname, status] of [['old.example.com', 'verified'], ['waiting.example.com', 'pending']] as const) {
    await stores.domains.create({ hostname, projectId: 'prj_1', accountId: 'acc_1', primary: false, status, apex: false, records: [], diagnostics: [], certificate: { status: 'none' }, createdAt: at });
  }
  // neither one whose checks stopped (verification expired) nor a pending one with a due time of its own
  await stores.domains.create({ hostname: 'expired.example.com', projectId: 'prj_1', accountId: 'acc_1', primary: false, status: 'failed', apex: false, records: [], diagnostics: [{ code: 'verification_expired', message: 'expired' }], certificate: { status: 'none' }, createdAt: at });
  await stores.domains.create({ hostname: 'due.example.com', projectId: 'prj_1', accountId: 'acc_1', primary: false, status: 'pending', apex: false, records: [], diagnostics: [], certificate: { status: 'none' }, createdAt: at, nextCheckAt: new Date(now() + HOUR).toISOString() });
  // verified domains are scheduled from the index without reading them: daily.example.com (checked
  // above, with a due time of its own) is among them, and its job moves to its own time when it comes up
  t.equal(await checks.seed(), 3, 'the two old ones and the verified one from the index; not the expired one or the pending one with a due time of its own');
  t.equal(await checks.seed(), 0, 'only once');
  const before = now();
  await nextCheck('waiting.example.com');
  t.ok(now() - before <= MINUTE, 'the pending one within a pending interval');
  await nextCheck('old.example.com');
  t.ok(now() - before <= DAY, 'the verified one within a day');
  t.match(await stores.domains.get('old.example.com'), { status: 'verified', health: 'ok', nextCheckAt: String });
});

t.test('a misconfigured domain failing the same way each day adds no event; a new finding does', async (t) => {
  clock.ms = T0 + 120 * DAY;
  await dns.setCname('parked.example.com', 'edge.localhost');
  await add('parked.example.com');
  await nextCheck('parked.example.com');
  await dns.clearCname('parked.example.com');
  await dns.setCname('parked.example.com', 'parked.example.net');
  for (let i = 0; i < 3; i++) await nextCheck('parked.example.com');
  t.equal((await stores.domains.get('parked.example.com'))!.health, 'misconfigured');
  const checked = async () => (await stores.domains.events('parked.example.com')).filter((e) => e.type === 'dns_checked').length;
  const before = await checked();
  for (let i = 0; i < 5; i++) await nextCheck('parked.example.com');
  t.equal(await checked(), before, 'five more days of the same finding: no event');
  t.equal((await stores.domains.get('parked.example.com'))!.lastCheckedAt, new Date(now()).toISOString(), 'but each check is recorded');
  await dns.clearCname('parked.example.com');
  await dns.setCname('parked.example.com', 'elsewhere.example.net');
  await nextCheck('parked.example.com');
  const events = await stores.domains.events('parked.example.com');
  t.equal(await checked(), before + 1, 'a CNAME pointing somewhere new is news');
  t.match(events.at(-1)?.message, /elsewhere\.example\.net/);
});
