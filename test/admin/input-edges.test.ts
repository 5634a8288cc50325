// The admin API on what owners and their tools send at its edges: hostnames in Unicode wherever a
// hostname is named, redirects that would chain or loop, null where a value is optional, the
// bearer scheme in any case, and the methods a path takes. A loop is refused as a loop, not with the
// chain's advice (which told the owner to redirect a domain to itself).
import t from 'tap';
import http from 'node:http';
import { ADMIN_TOKEN, startPortico } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { admin } from '../helpers/client.ts';

const dns = await startChalltestsrv();
t.teardown(() => dns.stop());
const upstream = await startUpstream();
t.teardown(() => upstream.stop());
const portico = await startPortico({ PORTICO_DNS_SERVERS: dns.dnsServer });
t.teardown(() => portico.stop());
const call = (method: string, path: string, body?: unknown, token?: string | null) => admin(portico.ports.admin, method, path, body, token);

const account = (await call('POST', '/admin/accounts', { plan: 'pro' })).json;
const project = (await call('POST', '/admin/projects', { accountId: account.id, name: 'books', upstream: upstream.url })).json;
const domains = `/admin/projects/${project.id}/domains`;

t.test('a hostname in Unicode names the same domain as its punycode, in paths and redirects', async (t) => {
  const added = await call('POST', domains, { hostname: 'Bücher.example.de' });
  t.equal(added.status, 201);
  t.equal(added.json.hostname, 'xn--bcher-kva.example.de');
  for (const name of ['bücher.example.de', 'BÜCHER.example.de.', 'xn--bcher-kva.example.de']) {
    const found = await call('GET', `${domains}/${encodeURIComponent(name)}`);
    t.equal(found.status, 200, `GET ${name}`);
    t.equal(found.json.hostname, 'xn--bcher-kva.example.de');
  }
  t.equal((await call('GET', `${domains}/${encodeURIComponent('bücher.example.de')}/events`)).status, 200, 'its timeline');
  t.equal((await call('POST', `${domains}/${encodeURIComponent('bücher.example.de')}/verify`)).status, 200, 'verify');

  t.equal((await call('POST', domains, { hostname: 'www.bücher.example.de' })).status, 201);
  const redirect = await call('POST', `/admin/projects/${project.id}/redirects`, { from: 'www.bücher.example.de', to: 'bücher.example.de' });
  t.equal(redirect.status, 201, redirect.text);
  t.match(redirect.json, { from: 'www.xn--bcher-kva.example.de', to: 'xn--bcher-kva.example.de', status: 301 });
  t.equal((await call('DELETE', `/admin/projects/${project.id}/redirects/${encodeURIComponent('www.bücher.example.de')}`)).status, 204, 'the redirect removed by its Unicode name');
  t.equal((await call('DELETE', `${domains}/${encodeURIComponent('www.bücher.example.de')}`)).status, 204, 'the domain removed by its Unicode name');
});

t.test('redirects: a chain or a loop, an IP address and a null status are refused', async (t) => {
  for (const hostname of ['a.example.net', 'b.example.net', 'c.example.net']) t.equal((await call('POST', domains, { hostname })).status, 201);
  const redirects = `/admin/projects/${project.id}/redirects`;
  t.equal((await call('POST', redirects, { from: 'a.example.net', to: 'b.example.net' })).status, 201);
  const loop = await call('POST', redirects, { from: 'b.example.net', to: 'a.example.net' });
  t.equal(loop.status, 409, 'b → a while a → b');
  t.match(loop.json, { code: 'conflict', status: 409 });
  // loop-advice: the refusal said "a.example.net redirects to b.example.net itself; redirect
  // b.example.net to b.example.net instead": the chain's advice, a redirect to itself
  t.match(loop.json.message, /^a\.example\.net redirects to b\.example\.net: a redirect from b\.example\.net to a\.example\.net would send visitors back and forth forever\./, 'called a loop');
  t.notMatch(loop.json.message, /redirect b\.example\.net to b\.example\.net|itself/, 'never advises a redirect to itself');
  const chain = await call('POST', redirects, { from: 'c.example.net', to: 'a.example.net' });
  t.equal(chain.status, 409, 'c → a → b: point c at b instead');
  t.match(chain.json.message, /a\.example\.net redirects to b\.example\.net itself; redirect c\.example\.net to b\.example\.net instead/);
  t.equal((await call('POST', redirects, { from: 'c.example.net', to: 'b.example.net' })).status, 201);
  t.equal((await call('POST', redirects, { from: 'b.example.net', to: 'elsewhere.example.org' })).status, 409, 'b is a target: b → elsewhere would make a → b a chain');
  t.equal((await call('POST', redirects, { from: 'b.example.net', to: '1.2.3.4' })).status, 400, 'an IP address');
  // a double click: one removal, the others find no redirect
  t.equal((await call('POST', domains, { hostname: 'twice.example.net' })).status, 201);
  t.equal((await call('POST', redirects, { from: 'twice.example.net', to: 'elsewhere.example.org' })).status, 201);
  const removals = await Promise.all(Array.from({ length: 8 }, () => call('DELETE', `${redirects}/twice.example.net`).then((r) => r.status)));
  t.same(removals.sort(), [204, ...Array(7).fill(404)], 'parallel removals of one redirect: one 204');
  const nullStatus = await call('POST', redirects, { from: 'b.example.net', to: 'elsewhere.example.org', status: null });
  t.equal(nullStatus.status, 400, 'status null is not "the default"');
  t.match(nullStatus.json.message, /"status" must be one of 301, 302, 307, 308/);
});

t.test('what is sent is checked before the plan; null is not a value', async (t) => {
  const free = (await call('POST', '/admin/accounts', { plan: 'free' })).json;
  const freeProject = (await call('POST', '/admin/projects', { accountId: free.id, name: 'freebie', upstream: upstream.url })).json;
  t.equal((await call('POST', `/admin/projects/${freeProject.id}/domains`, { hostname: 'bad..host.example.com' })).status, 400, 'a malformed name on a free plan: 400');
  t.equal((await call('POST', `/admin/projects/${freeProject.id}/domains`, { hostname: 'fine.example.com' })).status, 402, 'a good one: 402');
  t.equal((await call('POST', '/admin/keys', { accountId: account.id, environment: null })).status, 400, 'environment null');
  t.equal((await call('POST', '/admin/keys', { accountId: account.id })).status, 201, 'environment left out: production');
  t.equal((await call('POST', '/admin/projects', { accountId: account.id, name: 'zero', upstream: 'http://127.0.0.1:0' })).status, 400, 'upstream on port 0');
  t.equal((await call('POST', '/admin/reload', { force: true })).status, 400, 'reload takes no fields');
  t.equal((await call('POST', '/admin/reload')).status, 200, 'reload without a body');
});

t.test('the bearer scheme in any case; 405 names the methods; HEAD is GET without a body', async (t) => {
  const raw = (method: string, path: string, authorization: string) =>
    new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: portico.ports.admin, method, path, headers: { authorization } }, (res) => {
        let body = '';
        res.on('data', (chunk) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
      });
      req.on('error', reject);
      req.end();
    });
  t.equal((await raw('GET', `/admin/projects/${project.id}`, `bearer ${ADMIN_TOKEN}`)).status, 200, 'bearer');
  t.equal((await raw('GET', `/admin/projects/${project.id}`, `BEARER  ${ADMIN_TOKEN}`)).status, 200, 'BEARER with two spaces');
  t.equal((await raw('GET', `/admin/projects/${project.id}`, `Basic ${ADMIN_TOKEN}`)).status, 401, 'another scheme');
  const put = await raw('PUT', `/admin/accounts/${account.id}`, `Bearer ${ADMIN_TOKEN}`);
  t.equal(put.status, 405);
  t.equal(put.headers.allow, 'GET, PATCH, HEAD');
  const head = await raw('HEAD', `/admin/projects/${project.id}`, `Bearer ${ADMIN_TOKEN}`);
  t.equal(head.status, 200);
  t.equal(head.body, '', 'no body');
});

t.test('admin API calls have access lines, refused ones too; health checks and scrapes have none', async (t) => {
  const before = portico.logs.length;
  await call('GET', `/admin/projects/${project.id}`);
  await call('GET', '/admin/projects', undefined, 'wrong-token-0123456789');
  await call('GET', '/healthz', undefined, null);
  await call('GET', '/metrics', undefined, null);
  await new Promise((r) => setTimeout(r, 400)); // the log is written at least every 250 ms
  const lines = portico.logs.slice(before).filter((l) => l.includes('"msg":"request"')).map((l) => JSON.parse(l));
  t.match(lines, [
    // the hostname without the port, as on every access line (it was "127.0.0.1:<port>")
    { method: 'GET', hostname: /^127\.0\.0\.1$/, path: `/admin/projects/${project.id}`, route: 'admin', status: 200, durationMs: Number, clientIp: '127.0.0.1' },
    { method: 'GET', path: '/admin/projects', route: 'admin', status: 401 },
  ]);
  t.equal(lines.length, 2, 'none for /healthz and /metrics');
  t.notOk(portico.logs.slice(before).some((l) => l.includes('wrong-token')), 'the token sent is not logged');
});
