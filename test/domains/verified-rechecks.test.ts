// Regressions in the automatic checks of verified domains, on an injected clock with real DNS
// (challtestsrv), real embedded state and scheduler:
// - dns-error-not-misconfigured: challtestsrv answering SERVFAIL made a verified domain
//   `misconfigured` after three checks ("DNS has not pointed at the platform"), as if an outage of
//   our own resolvers were the owner's mistake;
// - ownership-txt-after-verify: the `_portico` TXT, a proof asked once at the first verification,
//   was required for as long as the domain existed: removing it made the domain misconfigured.
import t from 'tap';
import type { Domain } from '../../src/state/types.ts';
import { startChecksBed, MINUTE, DAY } from '../helpers/checks-bed.ts';

const { dns, stores, clock, now, scheduler, checks } = await startChecksBed(t, 'verified-rechecks');

async function add(hostname: string, ownershipToken?: string): Promise<void> {
  const at = new Date(now()).toISOString();
  const domain: Domain = {
    hostname, projectId: 'prj_1', accountId: 'acc_1', primary: false, status: 'pending', apex: false, records: [], diagnostics: [], certificate: { status: 'none' },
    createdAt: at, nextCheckAt: new Date(now() + MINUTE).toISOString(), recheck: { since: at, attempts: 0, failuresInRow: 0 },
    ...(ownershipToken ? { ownershipToken } : {}),
  };
  await stores.domains.create(domain);
  await checks.scheduleFirst(domain);
}

/** moves the clock to the domain's next automatic check and runs it; the domain after it */
async function nextCheck(hostname: string): Promise<Domain> {
  const before = (await stores.domains.get(hostname))!.lastCheckedAt;
  for (let i = 0; i < 50; i++) {
    const due = await stores.schedule.earliest();
    if (due === null) break;
    clock.ms = Math.max(clock.ms, due);
    await scheduler.runDue();
    const domain = (await stores.domains.get(hostname))!;
    if (domain.lastCheckedAt !== before) return domain;
  }
  throw new Error(`no automatic check of ${hostname} came`);
}

t.test('dns-error-not-misconfigured: SERVFAIL on a verified domain keeps it ok; a real mismatch still counts', async (t) => {
  await add('outage.example.com');
  await dns.setCname('outage.example.com', 'edge.localhost');
  t.equal((await nextCheck('outage.example.com')).status, 'verified');
  const eventsBefore = (await stores.domains.events('outage.example.com')).length;

  await dns.setServfail('outage.example.com');
  for (let i = 1; i <= 5; i++) {
    const at = now();
    const checked = await nextCheck('outage.example.com');
    t.match(checked, { status: 'verified', health: 'ok', diagnostics: [{ code: 'dns_error' }] }, `check ${i} during the outage: still ok`);
    t.equal(checked.recheck?.failuresInRow, 0, 'not counted as a failed check');
    t.equal(Date.parse(checked.nextCheckAt!), clock.ms + DAY, 'the next check as usual');
    t.ok(clock.ms >= at, 'checks come one a day');
  }
  const during = (await stores.domains.events('outage.example.com')).slice(eventsBefore);
  t.equal(during.length, 1, 'one event for the outage, not one per check');
  t.match(during[0], { type: 'dns_checked', message: /could not be made/, details: { result: 'error' } });
  t.notMatch(during[0].message, /has not pointed/);

  await dns.clearServfail('outage.example.com');
  await dns.clearCname('outage.example.com');
  await dns.setCname('outage.example.com', 'elsewhere.example.net');
  t.match(await nextCheck('outage.example.com'), { health: 'ok', diagnostics: [{ code: 'cname_mismatch' }] }, 'first failed check');
  t.match(await nextCheck('outage.example.com'), { health: 'ok' }, 'second failed check');
  const bad = await nextCheck('outage.example.com');
  t.match(bad, { status: 'verified', health: 'misconfigured', diagnostics: [{ code: 'cname_mismatch' }] }, 'the third makes it misconfigured');
  t.equal((await stores.domains.events('outage.example.com')).filter((e) => e.type === 'misconfigured').length, 1);

  // an outage neither fixes a misconfigured domain nor counts against it
  await dns.setServfail('outage.example.com');
  t.match(await nextCheck('outage.example.com'), { health: 'misconfigured', diagnostics: [{ code: 'dns_error' }] });
  await dns.clearServfail('outage.example.com');
  await dns.clearCname('outage.example.com');
  await dns.setCname('outage.example.com', 'edge.localhost');
  t.match(await nextCheck('outage.example.com'), { health: 'ok', diagnostics: [] }, 'a passing check recovers it');
});

t.test('ownership-txt-after-verify: the TXT is needed to verify, not afterwards', async (t) => {
  const token = 'portico-verify=0123456789abcdef';
  await add('claimed.example.com', token);
  await dns.setCname('claimed.example.com', 'edge.localhost');
  t.match(await nextCheck('claimed.example.com'), { status: 'pending', diagnostics: [{ code: 'ownership_txt_missing' }] }, 'the first verification wants the TXT');
  await dns.addTxt('_portico.claimed.example.com', token);
  t.match(await nextCheck('claimed.example.com'), { status: 'verified', health: 'ok', diagnostics: [] });

  await dns.clearTxt('_portico.claimed.example.com');
  for (let i = 1; i <= 4; i++) {
    t.match(await nextCheck('claimed.example.com'), { status: 'verified', health: 'ok', diagnostics: [] }, `check ${i} without the TXT: ok`);
  }
  // the records that matter are still checked
  await dns.clearCname('claimed.example.com');
  await dns.setCname('claimed.example.com', 'elsewhere.example.net');
  for (let i = 0; i < 3; i++) await nextCheck('claimed.example.com');
  t.match(await stores.domains.get('claimed.example.com'), { health: 'misconfigured', diagnostics: [{ code: 'cname_mismatch' }] });
});
