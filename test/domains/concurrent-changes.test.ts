// An owner's changes to the domains of one project take turns per project, also across instances.
// The project's rules (at most one primary; no redirect chains or loops) were guarded per hostname
// within one process: `A→B` and `B→A` sent at once were both accepted (a loop stored and served),
// `primary` on two domains at once left two primaries, and two instances did not take turns at all.
import t from 'tap';
import type { Test } from 'tap';
import dgram from 'node:dgram';
import { Redis } from 'ioredis';
import { startPortico, cleanup, type Instance } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { startRedis } from '../helpers/redis.ts';
import { admin } from '../helpers/client.ts';

const ROUNDS = 25;

const dns = await startChalltestsrv();
t.teardown(() => dns.stop());
const upstream = await startUpstream();
t.teardown(() => upstream.stop());
const redis = await startRedis();
t.teardown(() => redis.stop());

// stopped at the end of the test that started it: an instance left running on the shared Redis claims
// the next test's scheduled domain checks and runs them with its own intervals (the last test's check
// every 100 ms became one a day once an instance of the test before took it)
async function started(t: Test, env: Record<string, string> = {}): Promise<Instance> {
  const instance = await startPortico({ PORTICO_DNS_SERVERS: dns.dnsServer, ...env });
  t.teardown(async () => {
    await instance.stop();
    cleanup(instance.dataDir, instance.certsDir);
  });
  return instance;
}

/** a project on a paid plan with these domains, verified when asked */
async function projectWith(t: Test, port: number, name: string, hostnames: string[], { verified = false } = {}): Promise<string> {
  const account = (await admin(port, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const project = (await admin(port, 'POST', '/admin/projects', { accountId: account.id, name, upstream: upstream.url })).json;
  for (const hostname of hostnames) {
    t.equal((await admin(port, 'POST', `/admin/projects/${project.id}/domains`, { hostname })).status, 201, `${hostname} added`);
    if (!verified) continue;
    await dns.setCname(hostname, 'edge.localhost');
    t.equal((await admin(port, 'POST', `/admin/projects/${project.id}/domains/${hostname}/verify`)).json.status, 'verified', `${hostname} verified`);
  }
  return project.id;
}

/**
 * Rounds of `from a to b` on one port and `from b to a` on the other, sent at once; each round's
 * redirects are removed again. What was answered and what was stored, per round, when either is wrong.
 */
async function crosswise(ports: [number, number], projectId: string, a: string, b: string) {
  const wrong: string[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const answers = await Promise.all([
      admin(ports[0], 'POST', `/admin/projects/${projectId}/redirects`, { from: a, to: b }),
      admin(ports[1], 'POST', `/admin/projects/${projectId}/redirects`, { from: b, to: a }),
    ]);
    const statuses = answers.map((answer) => answer.status).sort();
    const redirects: Array<{ from: string; to: string }> = (await admin(ports[0], 'GET', `/admin/projects/${projectId}`)).json.redirects;
    const stored = redirects.map((r) => `${r.from}→${r.to}`).sort();
    if (statuses.join() !== '201,409' || stored.length !== 1) wrong.push(`round ${round}: ${statuses.join(' ')}, stored ${stored.join(' ') || 'none'}`);
    for (const r of redirects) await admin(ports[0], 'DELETE', `/admin/projects/${projectId}/redirects/${r.from}`);
  }
  return wrong;
}

/** Rounds of `primary: true` on two of the three domains, sent at once (one on each port). */
async function primaryTwice(ports: [number, number], projectId: string, hostnames: string[]) {
  const wrong: string[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const first = hostnames[round % 3]!;
    const second = hostnames[(round + 1) % 3]!;
    const answers = await Promise.all([
      admin(ports[0], 'PATCH', `/admin/projects/${projectId}/domains/${first}`, { primary: true }),
      admin(ports[1], 'PATCH', `/admin/projects/${projectId}/domains/${second}`, { primary: true }),
    ]);
    const after: Array<{ hostname: string; primary: boolean }> = (await admin(ports[0], 'GET', `/admin/projects/${projectId}/domains`)).json;
    const primaries = after.filter((d) => d.primary).map((d) => d.hostname);
    const statuses = answers.map((answer) => answer.status);
    if (statuses.join() !== '200,200' || primaries.length !== 1) wrong.push(`round ${round}: ${statuses.join(' ')}, primary ${primaries.join(' ') || 'none'}`);
  }
  return wrong;
}

t.test('one instance, embedded state', async (t) => {
  const portico = await started(t);
  const port = portico.ports.admin;

  t.test('A→B and B→A at once: one is refused, never a loop', async (t) => {
    const id = await projectWith(t, port, 'loops', ['a.loops.example', 'b.loops.example']);
    t.same(await crosswise([port, port], id, 'a.loops.example', 'b.loops.example'), [], `each of ${ROUNDS} rounds: 201 and 409, one redirect stored`);
  });

  t.test('primary on two domains at once: one primary after', async (t) => {
    const hostnames = ['p1.primaries.example', 'p2.primaries.example', 'p3.primaries.example'];
    const id = await projectWith(t, port, 'primaries', hostnames, { verified: true });
    t.same(await primaryTwice([port, port], id, hostnames), [], `each of ${ROUNDS} rounds: 200, 200 and one primary`);
  });
});

t.test('two instances on one Redis', async (t) => {
  const one = await started(t, { PORTICO_REDIS_URL: redis.url });
  const two = await started(t, { PORTICO_REDIS_URL: redis.url });
  const ports: [number, number] = [one.ports.admin, two.ports.admin];

  t.test('A→B on one and B→A on the other at once: never a loop', async (t) => {
    const id = await projectWith(t, ports[0], 'shared-loops', ['a.shared.example', 'b.shared.example']);
    t.same(await crosswise(ports, id, 'a.shared.example', 'b.shared.example'), [], `each of ${ROUNDS} rounds: 201 and 409, one redirect stored`);
  });

  t.test('primary on one and on the other at once: one primary after', async (t) => {
    const hostnames = ['p1.shared.example', 'p2.shared.example', 'p3.shared.example'];
    const id = await projectWith(t, ports[0], 'shared-primaries', hostnames, { verified: true });
    t.same(await primaryTwice(ports, id, hostnames), [], `each of ${ROUNDS} rounds: 200, 200 and one primary`);
  });

  t.test("a change waits for another instance's turn, and gives up with 503 and Retry-After", async (t) => {
    const id = await projectWith(t, ports[0], 'held', ['a.held.example', 'b.held.example']);
    const client = new Redis(redis.url);
    t.teardown(() => client.quit());
    const lock = `portico:lock:domains-of:${id}`;

    // an instance that died holding the turn: it lapses, the change goes through after it
    await client.set(lock, 'gone', 'PX', 1500);
    let since = Date.now();
    const late = await admin(ports[1], 'POST', `/admin/projects/${id}/redirects`, { from: 'a.held.example', to: 'b.held.example' });
    t.equal(late.status, 201, 'made once the lapsed turn was free');
    t.ok(Date.now() - since >= 1000, `it waited for the turn (${Date.now() - since} ms)`);

    // one that keeps it: refused after a bounded wait, like any write while shared state is unavailable
    await client.set(lock, 'busy', 'PX', 60_000);
    since = Date.now();
    const refused = await admin(ports[0], 'DELETE', `/admin/projects/${id}/redirects/a.held.example`);
    t.equal(refused.status, 503, 'refused while another instance holds the turn');
    t.match(refused.json, { code: 'service_unavailable', status: 503 }, 'with the Error body');
    t.match(refused.headers['retry-after'], /^[1-9]\d*$/, 'with Retry-After in seconds');
    t.ok(Date.now() - since < 10_000, `the wait is bounded (${Date.now() - since} ms)`);
    t.equal((await admin(ports[0], 'GET', `/admin/projects/${id}`)).json.redirects.length, 1, 'nothing changed');
    t.equal(await client.get(lock), 'busy', "the other instance's turn is left alone");

    await client.del(lock);
    t.equal((await admin(ports[0], 'DELETE', `/admin/projects/${id}/redirects/a.held.example`)).status, 204, 'goes through once the turn is free');
    t.equal(await client.exists(lock), 0, 'and the turn is given back');
  });
});

t.test('automatic checks every 100 ms never write over an owner\'s redirect changes', async (t) => {
  // a check reads the domain after its DNS lookup and writes it whole: outside the project's turn, a
  // redirect made between its read and its write was lost, and one removed came back
  const portico = await started(t, { PORTICO_REDIS_URL: redis.url, PORTICO_VERIFIED_RECHECK_MS: '100' });
  const port = portico.ports.admin;
  const id = await projectWith(t, port, 'checked', ['a.checked.example', 'b.checked.example'], { verified: true });
  const checksRunNow = async () => {
    const text = (await admin(port, 'GET', '/metrics')).text;
    return [...text.matchAll(/^portico_domain_checks_total\{[^}]*\} (\d+)/gm)].reduce((sum, m) => sum + Number(m[1]), 0);
  };
  const redirectOfA = async () => (await admin(port, 'GET', `/admin/projects/${id}/domains/a.checked.example`)).json.redirect as unknown;
  const wrong: string[] = [];
  const checksBefore = await checksRunNow();
  const until = Date.now() + 6_000;
  let rounds = 0;
  for (; Date.now() < until; rounds++) {
    const added = await admin(port, 'POST', `/admin/projects/${id}/redirects`, { from: 'a.checked.example', to: 'b.checked.example' });
    if (added.status !== 201) wrong.push(`round ${rounds}: add answered ${added.status}`);
    if (!(await redirectOfA())) wrong.push(`round ${rounds}: the redirect just made is gone`);
    const removed = await admin(port, 'DELETE', `/admin/projects/${id}/redirects/a.checked.example`);
    if (removed.status !== 204) wrong.push(`round ${rounds}: remove answered ${removed.status}`);
    if (await redirectOfA()) wrong.push(`round ${rounds}: the redirect just removed is back`);
  }
  const checks = (await checksRunNow()) - checksBefore;
  t.ok(checks >= 3, `automatic checks ran meanwhile (${checks})`);
  t.same(wrong, [], `${rounds} rounds of add and remove, each change kept`);
});

t.test('a Verify waiting on a resolver that never answers does not hold the project\'s other changes', async (t) => {
  // the lookup ran inside the project's turn: ~7 s (two tries of 2 s per query) against the 6 s others
  // wait, so another instance's change answered 503 and this instance's waited behind it
  const silent = dgram.createSocket('udp4');
  silent.on('message', () => undefined);
  await new Promise<void>((resolve) => silent.bind(0, '127.0.0.1', resolve));
  t.teardown(() => silent.close());
  const portico = await startPortico({ PORTICO_DNS_SERVERS: `127.0.0.1:${silent.address().port}` });
  t.teardown(async () => {
    await portico.stop();
    cleanup(portico.dataDir, portico.certsDir);
  });
  const port = portico.ports.admin;
  const id = await projectWith(t, port, 'silentdns', ['one.silent.example', 'two.silent.example']);
  const order: string[] = [];
  const verify = admin(port, 'POST', `/admin/projects/${id}/domains/one.silent.example/verify`).then((answer) => (order.push('verify'), answer));
  await new Promise((resolve) => setTimeout(resolve, 300));
  const patch = await admin(port, 'PATCH', `/admin/projects/${id}/domains/two.silent.example`, { hsts: { maxAge: 60 } });
  order.push('patch');
  t.equal(patch.status, 200, 'the change to the other domain is made');
  t.equal((await verify).status, 200, 'and the verify answers once DNS gives up');
  t.same(order, ['patch', 'verify'], 'the change did not wait for the verify\'s DNS lookup');
});
