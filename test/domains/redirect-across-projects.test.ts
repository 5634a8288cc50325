// Redirects between the domains of two projects. `o1 → k2` (project O) and `k2 → o1` (project P) sent
// at once were both accepted (4 of 6 runs embedded, 1 of 6 on two instances sharing Redis) and the
// visitors of both went back and forth forever: each change took only its own project's turn, so
// neither saw the other's redirect. A chain across projects (o1 → k2 → shop) is accepted; any loop is
// refused.
import t from 'tap';
import type { Test } from 'tap';
import { startPortico, cleanup, type Instance } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { startRedis } from '../helpers/redis.ts';
import { admin, request } from '../helpers/client.ts';

const ROUNDS = 10;

const dns = await startChalltestsrv();
t.teardown(() => dns.stop());
const upstream = await startUpstream();
t.teardown(() => upstream.stop());

async function started(env: Record<string, string> = {}): Promise<Instance> {
  const instance = await startPortico({ PORTICO_DNS_SERVERS: dns.dnsServer, ...env });
  t.teardown(async () => {
    await instance.stop();
    cleanup(instance.dataDir, instance.certsDir);
  });
  return instance;
}

/** a project of its own pro account with these domains, verified */
async function projectWith(t: Test, port: number, name: string, hostnames: string[]): Promise<string> {
  const account = (await admin(port, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const project = (await admin(port, 'POST', '/admin/projects', { accountId: account.id, name, upstream: upstream.url })).json;
  for (const hostname of hostnames) {
    t.equal((await admin(port, 'POST', `/admin/projects/${project.id}/domains`, { hostname })).status, 201, `${hostname} added`);
    await dns.setCname(hostname, 'edge.localhost');
    t.equal((await admin(port, 'POST', `/admin/projects/${project.id}/domains/${hostname}/verify`)).json.status, 'verified', `${hostname} verified`);
  }
  return project.id;
}

/**
 * Rounds of `a → b` in project one and `b → a` in project two, sent at once (on the two ports); the
 * redirect stored is removed after each round. The rounds where other than one was accepted.
 */
async function crosswise(ports: [number, number], [one, a]: [string, string], [two, b]: [string, string]) {
  const wrong: string[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const answers = await Promise.all([
      admin(ports[0], 'POST', `/admin/projects/${one}/redirects`, { from: a, to: b }),
      admin(ports[1], 'POST', `/admin/projects/${two}/redirects`, { from: b, to: a }),
    ]);
    const statuses = answers.map((answer) => answer.status).sort();
    const stored = [
      ...(await admin(ports[0], 'GET', `/admin/projects/${one}`)).json.redirects.map((r: { from: string }) => ({ project: one, from: r.from })),
      ...(await admin(ports[0], 'GET', `/admin/projects/${two}`)).json.redirects.map((r: { from: string }) => ({ project: two, from: r.from })),
    ];
    if (statuses.join() !== '201,409' || stored.length !== 1) wrong.push(`round ${round}: ${statuses.join(' ')}, ${stored.length} stored`);
    for (const r of stored) await admin(ports[0], 'DELETE', `/admin/projects/${r.project}/redirects/${r.from}`);
  }
  return wrong;
}

t.test('one instance, embedded state: two projects redirecting to each other at once', async (t) => {
  const port = (await started()).ports.admin;
  const o = await projectWith(t, port, 'oprojekt', ['o1.example.net']);
  const p = await projectWith(t, port, 'pprojekt', ['k2.example.org']);
  t.same(await crosswise([port, port], [o, 'o1.example.net'], [p, 'k2.example.org']), [], `each of ${ROUNDS} rounds: one 201 and one 409, one redirect stored`);
  // the other way round: the project whose id sorts first is the one sent second
  t.same(await crosswise([port, port], [p, 'k2.example.org'], [o, 'o1.example.net']), [], `each of ${ROUNDS} rounds the other way round`);
});

t.test('two instances on one Redis: two projects redirecting to each other at once', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const one = await started({ PORTICO_REDIS_URL: redis.url });
  const two = await started({ PORTICO_REDIS_URL: redis.url });
  const ports: [number, number] = [one.ports.admin, two.ports.admin];
  const o = await projectWith(t, ports[0], 'osharedproj', ['o1.shared.example.net']);
  const p = await projectWith(t, ports[0], 'psharedproj', ['k2.shared.example.org']);
  t.same(await crosswise(ports, [o, 'o1.shared.example.net'], [p, 'k2.shared.example.org']), [], `each of ${ROUNDS} rounds: one 201 and one 409, one redirect stored`);
});

t.test('chains across projects are accepted; loops through them are refused', async (t) => {
  const portico = await started();
  const port = portico.ports.admin;
  const o = await projectWith(t, port, 'chaino', ['o1.chain.example.net']);
  const p = await projectWith(t, port, 'chainp', ['k2.chain.example.org']);
  const q = await projectWith(t, port, 'chainq', ['q3.chain.example.com']);
  const redirect = (project: string, from: string, to: string) => admin(port, 'POST', `/admin/projects/${project}/redirects`, { from, to });

  t.equal((await redirect(o, 'o1.chain.example.net', 'k2.chain.example.org')).status, 201, 'o1 → k2 (another project)');
  // refusing it because another account points at k2 would let any account block another's change
  t.equal((await redirect(p, 'k2.chain.example.org', 'q3.chain.example.com')).status, 201, 'k2 → q3: the owner of k2 may redirect it');
  const toO1 = await redirect(q, 'q3.chain.example.com', 'o1.chain.example.net');
  t.equal(toO1.status, 409, 'q3 → o1 would close the loop o1 → k2 → q3 → o1');
  t.match(toO1.json, { code: 'conflict' });
  t.match(toO1.json.message, /^o1\.chain\.example\.net leads back to q3\.chain\.example\.com \(q3\.chain\.example\.com → o1\.chain\.example\.net → k2\.chain\.example\.org → q3\.chain\.example\.com\)/, 'called a loop, with the way round');
  t.notMatch(toO1.json.message, /redirect q3\.chain\.example\.com to k2/, 'never advises the redirect that closes the loop too');
  const toK2 = await redirect(q, 'q3.chain.example.com', 'k2.chain.example.org');
  t.equal(toK2.status, 409, 'q3 → k2 would close the loop k2 → q3 → k2');
  t.match(toK2.json.message, /back and forth forever/, 'called a loop');

  const visit = await request(portico.ports.https, 'o1.chain.example.net', portico.ca, { path: '/a?b=1', identity: 'localhost' });
  t.equal(visit.status, 301);
  t.match(visit.headers.location, /^https:\/\/k2\.chain\.example\.org(:\d+)?\/a\?b=1$/, "o1's visitors go to k2 (and from there on to q3)");
});
