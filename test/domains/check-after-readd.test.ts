// A DNS check of a domain that is removed while the check waits for DNS, its name added back to the same
// project before the answer: what the check found is the old domain's. It was stored on the new one —
// verified (and its certificate ordered) though its DNS pointed nowhere, with the old domain's
// `dns_checked`/`verified` steps on its timeline. Now the check stores nothing and says the domain was
// removed (Verify answers 404 `removed meanwhile`); the new domain is checked on its own.
// Real DNS (challtestsrv); the first check's last answer (CAA) is held back until the name is added back.
import t from 'tap';
import type { Domain } from '../../src/state/types.ts';
import type { Resolver } from '../../src/domains/verifier.ts';
import { startChecksBed } from '../helpers/checks-bed.ts';

const hostname = 'back.example.com';
// set while a test holds the CAA answer for the name back
let held: { release: () => void; reached: () => void } | null = null;
const { dns, stores, clock, now, checks } = await startChecksBed(t, 'check-after-readd', {
  onVerified: (domain) => verified.push(domain),
  resolver: (real): Resolver => ({
    resolveCname: (name) => real.resolveCname(name),
    resolve4: (name) => real.resolve4(name),
    resolve6: (name) => real.resolve6(name),
    resolveTxt: (name) => real.resolveTxt(name),
    // CAA comes last in a check, once the CNAME has been found right: held there
    async resolveCaa(name) {
      const answer = real.resolveCaa(name);
      const hold = held;
      if (name === hostname && hold) {
        held = null;
        hold.reached();
        await new Promise<void>((resolve) => (hold.release = resolve));
      }
      return answer;
    },
  }),
});
const verified: Domain[] = [];

async function add(nextCheckAt?: number): Promise<Domain> {
  const at = new Date(now()).toISOString();
  const domain: Domain = {
    hostname, projectId: 'prj_1', accountId: 'acc_1', primary: false, status: 'pending', apex: false, records: [], diagnostics: [], certificate: { status: 'none' },
    createdAt: at, recheck: { since: at, attempts: 0, failuresInRow: 0 },
    ...(nextCheckAt ? { nextCheckAt: new Date(nextCheckAt).toISOString() } : {}),
  };
  t.equal(await stores.domains.create(domain), null, 'added');
  return (await stores.domains.get(hostname))!;
}

for (const reason of ['verify', 'recheck'] as const) {
  t.test(`${reason}: a check of the removed domain stores nothing on the one added back`, async (t) => {
    await dns.setCname(hostname, 'edge.localhost');
    const old = await add();
    let reached!: () => void;
    const atDns = new Promise<void>((resolve) => (reached = resolve));
    const hold = { release: () => undefined, reached };
    held = hold;
    const checking = checks.run(old, reason, { schedule: false });
    await atDns;
    // the owner removes the domain, its record goes, and the name is added back (a new domain)
    t.ok(await stores.domains.remove(hostname, new Date(now()).toISOString()), 'removed');
    await dns.clearCname(hostname);
    clock.ms += 1_000;
    const added = await add();
    const eventsBefore = (await stores.domains.events(hostname)).length;
    hold.release();
    t.equal(await checking, null, 'the check says the domain it checked was removed');
    const current = (await stores.domains.get(hostname))!;
    t.equal(current.createdAt, added.createdAt, 'the domain added back is there');
    t.equal(current.status, 'pending', `still pending: its DNS points nowhere (${JSON.stringify(current.diagnostics)})`);
    t.equal(current.lastCheckedAt, undefined, 'not checked yet');
    t.same(verified.map((d) => d.hostname), [], 'no certificate started');
    t.equal((await stores.domains.events(hostname)).length, eventsBefore, "nothing of the old check on the new domain's timeline");
    // its own check finds what its DNS says now
    const own = await checks.run(current, reason, { schedule: false });
    t.equal(own?.status, 'pending', 'its own check: pending');
    t.ok((own?.diagnostics.length ?? 0) > 0, `with what its DNS lacks (${JSON.stringify(own?.diagnostics.map((d) => d.code))})`);
    await stores.domains.remove(hostname, new Date(now()).toISOString());
  });
}

// The removal cancels the name's scheduled check once the record is gone; a name added back in between
// had its own first check scheduled under the same name, and lost it: no automatic check ever came.
t.test("a removal's cancel leaves the first check of the name added back meanwhile", async (t) => {
  // the scheduler has looked at the store: this hour's due times are loaded, as in a running Portico
  t.same(await stores.schedule.claim(now(), 10, 60_000), [], 'nothing due yet');
  const old = await add(now() + 60_000);
  await checks.scheduleFirst(old);
  t.ok(await stores.domains.remove(hostname, new Date(now()).toISOString()), 'removed');
  clock.ms += 1_000;
  const added = await add(now() + 60_000);
  await checks.scheduleFirst(added);
  // the removal goes on: its checks stop
  await checks.forget(hostname);
  const due = await stores.schedule.claim(now() + 120_000, 10, 60_000);
  t.same(due.map((job) => [job.kind, job.key, job.dueAt]), [['domain-check', hostname, Date.parse(added.nextCheckAt!)]], "the new domain's first check is still scheduled");
  for (const job of due) await stores.schedule.finish(job);
  // and a removal with nothing added back leaves no check behind
  t.ok(await stores.domains.remove(hostname, new Date(now()).toISOString()), 'removed again');
  await checks.forget(hostname);
  t.same(await stores.schedule.claim(now() + 120_000, 10, 60_000), [], 'no check of a removed name');
});
