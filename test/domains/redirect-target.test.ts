// What a redirect's `to` may be, and a second redirect of the same domain. `to` was checked less
// than a domain's hostname: "xn--zz.com" (punycode that decodes to nothing) was accepted and its
// visitors sent to https://xn--zz.com/, and "com.1", "example.123" (a numeric last label, which
// browsers read as an IPv4 address) were accepted too. A target still may be what a domain may not:
// a site outside Portico, a project's default subdomain, an API hostname.
import t from 'tap';
import { startPortico, cleanup } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { admin, request } from '../helpers/client.ts';

const dns = await startChalltestsrv();
t.teardown(() => dns.stop());
const upstream = await startUpstream();
t.teardown(() => upstream.stop());
const portico = await startPortico({ PORTICO_DNS_SERVERS: dns.dnsServer });
t.teardown(async () => {
  await portico.stop();
  cleanup(portico.dataDir, portico.certsDir);
});
const call = (method: string, path: string, body?: unknown) => admin(portico.ports.admin, method, path, body);
const visit = (hostname: string) => request(portico.ports.https, hostname, portico.ca, { path: '/echo?q=1', identity: 'localhost' });

const account = (await call('POST', '/admin/accounts', { plan: 'pro' })).json;
const project = (await call('POST', '/admin/projects', { accountId: account.id, name: 'targets', upstream: upstream.url })).json;
const redirects = `/admin/projects/${project.id}/redirects`;
await call('POST', `/admin/projects/${project.id}/domains`, { hostname: 'from.targets.example' });
await dns.setCname('from.targets.example', 'edge.localhost');
const verified = await call('POST', `/admin/projects/${project.id}/domains/from.targets.example/verify`);
if (verified.json?.status !== 'verified') throw new Error(`from.targets.example did not verify: ${verified.text}`);

t.test('a target is refused with the rules and words a domain gets', async (t) => {
  for (const to of ['xn--zz.com', 'com.1', 'example.123', 'shop.example.0x7f', 'xn--zz.example.com']) {
    const refused = await call('POST', redirects, { from: 'from.targets.example', to });
    t.equal(refused.status, 400, `${to} refused`);
    t.equal(refused.json.code, 'invalid_request', `${to}: invalid_request, like any other bad "to"`);
    const asDomain = await call('POST', `/admin/projects/${project.id}/domains`, { hostname: to });
    t.equal(asDomain.status, 400, `${to} is refused as a domain too`);
    t.equal(refused.json.message, asDomain.json.message, `${to}: the same words (${refused.json.message})`);
  }
  t.same((await call('GET', `/admin/projects/${project.id}`)).json.redirects, [], 'none was stored');
  t.equal((await visit('from.targets.example')).status, 200, 'the domain still serves the project');
  for (const to of ['https://shop.example.com', 'shop.example.com:8443', 'shop.example.com/path', '192.0.2.1', '[::1]', '*.example.com', 'not a hostname', 'shop_1.example.com']) {
    const refused = await call('POST', redirects, { from: 'from.targets.example', to });
    t.equal(refused.status, 400, `${to} refused`);
    t.match(refused.json.message, /^"to" must be a hostname such as www\.example\.com \(no scheme, path, port or IP address\)\.$/, `${to}: told what "to" takes`);
  }
});

t.test('a target may be what a domain may not', async (t) => {
  for (const [to, stored] of [
    ['elsewhere.example.org', 'elsewhere.example.org'],
    ['Bücher.example.de.', 'xn--bcher-kva.example.de'],
    ['xn--bcher-kva.example.de', 'xn--bcher-kva.example.de'],
    ['targets.localhost', 'targets.localhost'],
    ['api.localhost', 'api.localhost'],
    ['co.uk', 'co.uk'],
  ] as const) {
    const made = await call('POST', redirects, { from: 'from.targets.example', to });
    t.equal(made.status, 201, `${to} accepted: ${made.text}`);
    t.equal(made.json.to, stored, `stored as ${stored}`);
  }
  t.equal((await call('DELETE', `${redirects}/from.targets.example`)).status, 204);
});

t.test('a second redirect of the same domain replaces the first', async (t) => {
  t.same((await call('POST', redirects, { from: 'from.targets.example', to: 'first.example.org' })).json, { from: 'from.targets.example', to: 'first.example.org', status: 301 });
  const second = await call('POST', redirects, { from: 'from.targets.example', to: 'second.example.org', status: 308 });
  t.equal(second.status, 201, 'answered 201 like the first');
  t.same(second.json, { from: 'from.targets.example', to: 'second.example.org', status: 308 });
  t.same((await call('GET', `/admin/projects/${project.id}`)).json.redirects, [{ from: 'from.targets.example', to: 'second.example.org', status: 308 }], 'one redirect, the second');
  const answer = await visit('from.targets.example');
  t.equal(answer.status, 308);
  t.match(answer.headers.location, /^https:\/\/second\.example\.org(:\d+)?\/echo\?q=1$/, 'visitors go where the second says');
});
