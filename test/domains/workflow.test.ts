// The owner's custom-domain workflow end to end: admin API, real DNS (challtestsrv), real HTTPS.
import t from 'tap';
import { startPortico } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { startRedis } from '../helpers/redis.ts';
import { admin, request } from '../helpers/client.ts';

const dns = await startChalltestsrv();
t.teardown(() => dns.stop());
const upstream = await startUpstream();
t.teardown(() => upstream.stop());
const portico = await startPortico({ PORTICO_DNS_SERVERS: dns.dnsServer, PORTICO_PUBLIC_HTTPS_PORT: '443' });
t.teardown(() => portico.stop());
const { ca, ports } = portico;
const call = (method: string, path: string, body?: unknown) => admin(ports.admin, method, path, body);
// the fallback certificate answers for these names; check it by its own name
const visit = (hostname: string, path = '/echo', method = 'GET') => request(ports.https, hostname, ca, { path, method, identity: 'localhost' });

const account = (await call('POST', '/admin/accounts', { plan: 'pro' })).json;
const project = (await call('POST', '/admin/projects', { accountId: account.id, name: 'shop', upstream: upstream.url })).json;
const domains = `/admin/projects/${project.id}/domains`;

t.test('a project answers at once on its default hostname', async (t) => {
  t.equal(project.defaultDomain, 'shop.localhost');
  const answer = await visit('shop.localhost', '/echo?x=1');
  t.equal(answer.status, 200);
  t.equal(answer.json.url, '/echo?x=1');
  t.equal(answer.json.headers['x-forwarded-host'], 'shop.localhost');
  t.equal(answer.json.headers['x-forwarded-proto'], 'https');
  t.equal(answer.json.headers['x-forwarded-for'], '127.0.0.1');
  const again = await call('POST', '/admin/projects', { accountId: account.id, name: 'shop', upstream: upstream.url });
  t.equal(again.status, 409, 'names are unique');
  t.equal(again.json.message, `This account has a project named shop already: ${project.id}, created ${project.createdAt}.`, 'the account\'s own project is named (a retried create finds it)');
  const other = (await call('POST', '/admin/accounts', { plan: 'pro' })).json;
  const taken = await call('POST', '/admin/projects', { accountId: other.id, name: 'shop', upstream: upstream.url });
  t.equal(taken.status, 409, 'for every account');
  t.equal(taken.json.message, 'A project named shop exists already; names are unique because they are hostnames.', 'another account\'s project is not named');
  t.equal((await call('POST', '/admin/projects', { accountId: account.id, name: 'api', upstream: upstream.url })).status, 400, 'reserved name');
  t.equal((await call('POST', '/admin/projects', { accountId: account.id, name: 'Bad_Name', upstream: upstream.url })).status, 400);
});

t.test('adding a domain shows the records to create', async (t) => {
  const sub = await call('POST', domains, { hostname: 'Shop.Example.COM.' });
  t.equal(sub.status, 201);
  t.match(sub.json, { hostname: 'shop.example.com', projectId: project.id, status: 'pending', primary: false, certificate: { status: 'none' } });
  t.same(sub.json.records, [{ type: 'CNAME', name: 'shop', value: 'edge.localhost', ttl: 3600 }]);
  const apex = await call('POST', domains, { hostname: 'example.com' });
  t.equal(apex.status, 201);
  t.match(apex.json.records, [{ type: 'ALIAS', name: '@', value: 'edge.localhost', ttl: 3600, note: /provider/ }]);
  const unknownTld = await call('POST', domains, { hostname: 'deep.shop.example.test' });
  t.match(unknownTld.json.records, [{ type: 'CNAME', name: 'deep.shop' }], 'unknown TLDs use the default rule');
  t.equal((await call('POST', domains, { hostname: 'shop.example.com' })).status, 409, 'twice → 409');
});

t.test('what cannot be added', async (t) => {
  for (const hostname of ['127.0.0.1', '[::1]', 'localhost', '*.example.com', `${'a'.repeat(64)}.example.com`, 'x.localhost', 'api.localhost', 'edge.localhost', 'exa mple.com', '', 42]) {
    const answer = await call('POST', domains, { hostname });
    t.equal(answer.status, 400, `${JSON.stringify(hostname)} → 400`);
    t.equal(answer.json.code, 'invalid_hostname');
  }
  t.equal((await call('POST', domains, { hostname: 'ok.example.org', extra: 1 })).status, 400, 'unknown fields');
  const free = (await call('POST', '/admin/accounts', { plan: 'free' })).json;
  const freeProject = (await call('POST', '/admin/projects', { accountId: free.id, name: 'freebie', upstream: upstream.url })).json;
  const paid = await call('POST', `/admin/projects/${freeProject.id}/domains`, { hostname: 'free.example.org' });
  t.equal(paid.status, 402);
  t.equal(paid.json.code, 'plan_required');
  const undeployed = (await call('POST', '/admin/projects', { accountId: account.id, name: 'nodeploy' })).json;
  t.equal((await call('POST', `/admin/projects/${undeployed.id}/domains`, { hostname: 'nd.example.org' })).status, 409, 'no deploy → 409');
  const other = (await call('POST', '/admin/projects', { accountId: account.id, name: 'other', upstream: upstream.url })).json;
  const taken = await call('POST', `/admin/projects/${other.id}/domains`, { hostname: 'shop.example.com' });
  t.equal(taken.status, 409, 'another project has it');
  t.match(taken.json.message, /another project/);
});

t.test('verify explains what is wrong until the DNS is right', async (t) => {
  const verify = async () => (await call('POST', `${domains}/shop.example.com/verify`)).json;
  let domain = await verify();
  t.equal(domain.status, 'pending');
  t.same(domain.diagnostics.map((d: { code: string }) => d.code), ['cname_missing']);
  t.match(domain.diagnostics[0].message, /48 hours/);
  t.equal((await visit('shop.example.com')).status, 404, 'not served before it verifies');

  await dns.addA('shop.example.com', ['192.0.2.10']);
  domain = await verify();
  t.same(domain.diagnostics.map((d: { code: string }) => d.code), ['a_record_conflict']);
  t.match(domain.diagnostics[0].message, /192\.0\.2\.10/);
  await dns.clearA('shop.example.com');

  await dns.setCname('shop.example.com', 'elsewhere.example.net');
  domain = await verify();
  t.equal(domain.status, 'failed');
  t.match(domain.diagnostics, [{ code: 'cname_mismatch', found: ['elsewhere.example.net'], expected: 'edge.localhost' }]);

  await dns.setCname('shop.example.com', 'EDGE.localhost.');
  await dns.addCaa('example.com', [{ tag: 'issue', value: 'other-ca.example' }]);
  domain = await verify();
  t.same(domain.diagnostics.map((d: { code: string }) => d.code), ['caa_blocks_ca']);
  t.match(domain.diagnostics[0].message, /letsencrypt\.org/);
  await dns.clearCaa('example.com');

  domain = await verify();
  t.equal(domain.status, 'verified');
  t.same(domain.diagnostics, []);
  t.equal(domain.primary, true, 'the first verified domain is primary');
  t.ok(domain.verifiedAt);
  const served = await visit('shop.example.com', '/echo?q=1');
  t.equal(served.status, 200);
  t.equal(served.json.headers['x-forwarded-host'], 'shop.example.com');
});

t.test('DNS errors are reported, not mistaken for absence', async (t) => {
  await call('POST', domains, { hostname: 'broken.example.org' });
  await dns.setServfail('broken.example.org');
  const domain = (await call('POST', `${domains}/broken.example.org/verify`)).json;
  t.ok(domain.diagnostics.some((d: { code: string }) => d.code === 'dns_error'));
  t.equal(domain.status, 'pending');
  await dns.clearServfail('broken.example.org');
});

t.test('primary, redirects and HSTS', async (t) => {
  await call('POST', domains, { hostname: 'www.example.com' });
  await dns.setCname('www.example.com', 'edge.localhost');
  const www = (await call('POST', `${domains}/www.example.com/verify`)).json;
  t.equal(www.status, 'verified');
  t.equal(www.primary, false, 'the primary stays');

  const redirect = await call('POST', `/admin/projects/${project.id}/redirects`, { from: 'www.example.com', to: 'shop.example.com' });
  t.equal(redirect.status, 201);
  t.same(redirect.json, { from: 'www.example.com', to: 'shop.example.com', status: 301 });
  const moved = await visit('www.example.com', '/a/b?c=d&e=%20f');
  t.equal(moved.status, 301);
  t.equal(moved.headers.location, 'https://shop.example.com/a/b?c=d&e=%20f');
  const head = await visit('www.example.com', '/x', 'HEAD');
  t.equal(head.status, 301);
  t.equal(head.headers.location, 'https://shop.example.com/x');
  t.equal((await call('POST', `/admin/projects/${project.id}/redirects`, { from: 'nope.example.com', to: 'shop.example.com' })).status, 404, 'from must be a domain of this project');
  t.equal((await call('POST', `/admin/projects/${project.id}/redirects`, { from: 'www.example.com', to: 'shop.example.com', status: 303 })).status, 400);
  const detail = (await call('GET', `/admin/projects/${project.id}`)).json;
  t.same(detail.redirects, [{ from: 'www.example.com', to: 'shop.example.com', status: 301 }]);
  t.equal((await call('DELETE', `/admin/projects/${project.id}/redirects/www.example.com`)).status, 204);
  t.equal((await visit('www.example.com')).status, 200, 'without the redirect it serves again');

  const primary = await call('PATCH', `${domains}/www.example.com`, { primary: true });
  t.equal(primary.json.primary, true);
  const list = (await call('GET', `/admin/projects/${project.id}`)).json.domains as Array<{ hostname: string; primary: boolean }>;
  t.same(list.filter((d) => d.primary).map((d) => d.hostname), ['www.example.com'], 'one primary');

  const hsts = await call('PATCH', `${domains}/shop.example.com`, { hsts: { maxAge: 31536000, includeSubDomains: true } });
  t.equal(hsts.status, 200);
  t.equal((await visit('shop.example.com')).headers['strict-transport-security'], 'max-age=31536000; includeSubDomains');
  t.equal((await visit('www.example.com')).headers['strict-transport-security'], undefined, 'only where configured');
  t.equal((await call('PATCH', `${domains}/shop.example.com`, { hsts: { maxAge: 10, preload: true } })).status, 400);
});

t.test('removing a domain stops traffic at once; a new account needs the TXT token', async (t) => {
  t.equal((await call('DELETE', `${domains}/www.example.com`)).status, 204);
  t.equal((await visit('www.example.com')).status, 404, 'the very next request is not served');
  t.equal((await call('DELETE', `${domains}/www.example.com`)).status, 404);
  const stranger = (await call('POST', '/admin/accounts', { plan: 'business' })).json;
  const theirs = (await call('POST', '/admin/projects', { accountId: stranger.id, name: 'theirs', upstream: upstream.url })).json;
  const claim = await call('POST', `/admin/projects/${theirs.id}/domains`, { hostname: 'www.example.com' });
  t.equal(claim.status, 201);
  const txt = claim.json.records.find((r: { type: string }) => r.type === 'TXT');
  t.match(txt, { name: '_portico.www', value: /^portico-verify=/ });
  const unproven = (await call('POST', `/admin/projects/${theirs.id}/domains/www.example.com/verify`)).json;
  t.ok(unproven.diagnostics.some((d: { code: string }) => d.code === 'ownership_txt_missing'));
  t.equal((await visit('www.example.com')).status, 404);
  // removing the unproven claim and adding it again does not skip the proof
  t.equal((await call('DELETE', `/admin/projects/${theirs.id}/domains/www.example.com`)).status, 204);
  const again = await call('POST', `/admin/projects/${theirs.id}/domains`, { hostname: 'www.example.com' });
  t.equal(again.status, 201);
  t.ok(again.json.records.some((r: { type: string }) => r.type === 'TXT'), 'the TXT record is asked for again');
  const stillUnproven = (await call('POST', `/admin/projects/${theirs.id}/domains/www.example.com/verify`)).json;
  t.equal(stillUnproven.status, 'pending', 'not verified without it');
  t.equal((await visit('www.example.com')).status, 404, 'not served');
  t.equal((await call('DELETE', `/admin/projects/${theirs.id}/domains/www.example.com`)).status, 204);
  const last = await call('POST', `/admin/projects/${theirs.id}/domains`, { hostname: 'www.example.com' });
  t.equal(last.status, 201);
  // each claim gets a token of its own
  await dns.addTxt('_portico.www.example.com', last.json.records.find((r: { type: string }) => r.type === 'TXT').value);
  const proven = (await call('POST', `/admin/projects/${theirs.id}/domains/www.example.com/verify`)).json;
  t.equal(proven.status, 'verified');
});

t.test('metrics count domains by status without hostname labels', async (t) => {
  const text = (await admin(ports.admin, 'GET', '/metrics')).text;
  t.match(text, /portico_domains\{status="verified"\} [1-9]/);
  t.notMatch(text, /example\.com/);
});

t.test('two instances on Redis: removal is seen by the other at once', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const env = { PORTICO_DNS_SERVERS: dns.dnsServer, PORTICO_REDIS_URL: redis.url };
  const a = await startPortico(env);
  t.teardown(() => a.stop());
  const b = await startPortico(env);
  t.teardown(() => b.stop());
  const owner = (await admin(a.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const shared = (await admin(a.ports.admin, 'POST', '/admin/projects', { accountId: owner.id, name: 'shared', upstream: upstream.url })).json;
  await admin(a.ports.admin, 'POST', `/admin/projects/${shared.id}/domains`, { hostname: 'blog.example.net' });
  await dns.setCname('blog.example.net', 'edge.localhost');
  t.equal((await admin(a.ports.admin, 'POST', `/admin/projects/${shared.id}/domains/blog.example.net/verify`)).json.status, 'verified');
  const onB = () => request(b.ports.https, 'blog.example.net', b.ca, { path: '/echo', identity: 'localhost' });
  let status = 0;
  for (let i = 0; i < 50 && status !== 200; i++) {
    status = (await onB()).status;
    if (status !== 200) await new Promise((r) => setTimeout(r, 20));
  }
  t.equal(status, 200, 'B serves the domain A verified');
  t.equal((await request(b.ports.https, 'shared.localhost', b.ca, { path: '/echo', identity: 'localhost' })).status, 200, 'default hostname on B');
  t.equal((await admin(a.ports.admin, 'DELETE', `/admin/projects/${shared.id}/domains/blog.example.net`)).status, 204);
  await new Promise((r) => setTimeout(r, 50));
  t.equal((await onB()).status, 404, 'B stops serving right after A removed it');

  // a double click, on two instances: one removal, the others answer 404
  await admin(a.ports.admin, 'POST', `/admin/projects/${shared.id}/domains`, { hostname: 'twice.example.net' });
  const statuses = await Promise.all(Array.from({ length: 10 }, (_, i) => admin((i % 2 ? a : b).ports.admin, 'DELETE', `/admin/projects/${shared.id}/domains/twice.example.net`).then((r) => r.status)));
  t.same(statuses.sort(), [204, ...Array(9).fill(404)], 'parallel removals on two instances: one 204');
});

t.test('parallel removals of one domain: one 204, the others 404, its timeline once', async (t) => {
  t.equal((await call('POST', domains, { hostname: 'twice.example.com' })).status, 201);
  const statuses = await Promise.all(Array.from({ length: 10 }, () => call('DELETE', `${domains}/twice.example.com`).then((r) => r.status)));
  t.same(statuses.sort(), [204, ...Array(9).fill(404)]);
  t.equal((await call('POST', domains, { hostname: 'twice.example.com' })).status, 201);
  const events = (await call('GET', `${domains}/twice.example.com/events`)).json;
  t.same(events.map((e: { type: string }) => e.type).filter((type: string) => type !== 'dns_checked'), ['added', 'removed', 'added'], 'added, removed once, added again');
});
