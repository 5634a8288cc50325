// Regression: one unreadable domain file (`{broken` in data/domains/<hostname>.json) made every admin
// read of its project answer 500: the project, its domain list, each domain. Now that domain alone
// fails (500, the file named in the error log); the project's lists answer with the other domains and
// the error log names the damaged file once, until it reads again. A real Portico on real files.
import t from 'tap';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { startPortico, cleanup, tempDir } from '../helpers/portico.ts';
import { admin, request } from '../helpers/client.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startUpstream } from '../helpers/upstream.ts';

const HOSTNAMES = ['a.example.com', 'b.example.com', 'c.example.com'];

t.test('a damaged domain file fails that domain, not its project', async (t) => {
  const dataDir = tempDir('domain-file-damage');
  t.teardown(() => cleanup(dataDir));
  const portico = await startPortico({ PORTICO_DATA_DIR: dataDir });
  t.teardown(() => portico.stop());
  const call = (method: string, url: string, body?: unknown) => admin(portico.ports.admin, method, url, body);
  const account = (await call('POST', '/admin/accounts', { plan: 'pro' })).json.id;
  const project = (await call('POST', '/admin/projects', { accountId: account, name: 'shop', upstream: 'http://127.0.0.1:9' })).json.id;
  for (const hostname of HOSTNAMES) t.equal((await call('POST', `/admin/projects/${project}/domains`, { hostname })).status, 201);

  const file = path.join(dataDir, 'domains', 'b.example.com.json');
  const good = readFileSync(file, 'utf8');
  writeFileSync(file, '{broken');
  const told = () => portico.logs.filter((line) => line.includes("a domain's file cannot be read"));

  const list = await call('GET', `/admin/projects/${project}/domains`);
  t.equal(list.status, 200, 'the domain list answers');
  t.same(list.json.map((d: { hostname: string }) => d.hostname), ['a.example.com', 'c.example.com'], 'with the readable domains');
  const detail = await call('GET', `/admin/projects/${project}`);
  t.equal(detail.status, 200, 'the project answers');
  t.same(detail.json.domains.map((d: { hostname: string }) => d.hostname), ['a.example.com', 'c.example.com']);
  t.equal((await call('GET', `/admin/projects/${project}/domains/a.example.com`)).status, 200, 'another domain answers');
  const broken = await call('GET', `/admin/projects/${project}/domains/b.example.com`);
  t.equal(broken.status, 500, 'the damaged domain itself does not');
  t.equal(broken.json.code, 'internal_error');
  t.ok(portico.logs.some((line) => line.includes('"msg":"request failed"') && line.includes(file)), 'its error log line names the file');

  t.equal(told().length, 1, 'the damage is logged once, for two list reads');
  t.match(JSON.parse(told()[0]), { level: 50, hostname: 'b.example.com', file });

  // repaired: listed again; damaged once more: told again
  writeFileSync(file, good);
  t.same((await call('GET', `/admin/projects/${project}/domains`)).json.map((d: { hostname: string }) => d.hostname), HOSTNAMES, 'repaired, it is listed again');
  writeFileSync(file, '');
  t.equal((await call('GET', `/admin/projects/${project}/domains`)).json.length, 2);
  t.equal(told().length, 2, 'damaged again after it read well: logged again');
});

// A damaged or deleted domain file left the domain impossible to remove: DELETE read the file first and
// answered 500 (damaged) or 404 (deleted by hand), while the index kept routing its traffic to the
// project. Now the removal goes by the index entry: 204, no longer served, gone after a restart, and the
// takeover guard still remembers the account that had it.
t.test('a domain whose file is damaged or gone can still be removed', async (t) => {
  const dns = await startChalltestsrv();
  t.teardown(() => dns.stop());
  const upstream = await startUpstream();
  t.teardown(() => upstream.stop());
  const dataDir = tempDir('domain-file-damage-removal');
  t.teardown(() => cleanup(dataDir));
  let portico = await startPortico({ PORTICO_DATA_DIR: dataDir, PORTICO_DNS_SERVERS: dns.dnsServer });
  t.teardown(() => portico.stop());
  const call = (method: string, url: string, body?: unknown) => admin(portico.ports.admin, method, url, body);
  const account = (await call('POST', '/admin/accounts', { plan: 'pro' })).json.id;
  const project = (await call('POST', '/admin/projects', { accountId: account, name: 'shop', upstream: upstream.url })).json.id;
  const served = (hostname: string) => request(portico.ports.https, hostname, portico.ca, { path: '/echo', identity: 'localhost' }).then((a) => a.status);
  for (const hostname of HOSTNAMES) {
    t.equal((await call('POST', `/admin/projects/${project}/domains`, { hostname })).status, 201);
    await dns.setCname(hostname, 'edge.localhost');
    t.equal((await call('POST', `/admin/projects/${project}/domains/${hostname}/verify`)).json.status, 'verified', `${hostname} verified`);
    t.equal(await served(hostname), 200, `${hostname} is served`);
  }

  writeFileSync(path.join(dataDir, 'domains', 'a.example.com.json'), '{broken');
  rmSync(path.join(dataDir, 'domains', 'b.example.com.json'));
  t.equal((await call('GET', `/admin/projects/${project}/domains/b.example.com`)).status, 404, 'a deleted file: the domain reads as unknown');
  t.equal(await served('b.example.com'), 200, 'but the index still serves it');

  for (const hostname of ['a.example.com', 'b.example.com']) {
    const removal = await call('DELETE', `/admin/projects/${project}/domains/${hostname}`);
    t.equal(removal.status, 204, `${hostname} removed (was ${removal.status} ${removal.text})`);
    t.not(await served(hostname), 200, `${hostname} is no longer served`);
    t.equal((await call('DELETE', `/admin/projects/${project}/domains/${hostname}`)).status, 404, 'a second removal finds nothing');
  }
  t.ok(portico.logs.some((line) => line.includes('the domain is removed from its index entry') && line.includes('a.example.com.json')), 'the damaged file is named in the log');
  t.equal((await call('DELETE', `/admin/projects/${project}/domains/c.example.com`)).status, 204, 'a readable domain is removed as before');
  const other = (await call('POST', '/admin/projects', { accountId: account, name: 'other', upstream: upstream.url })).json.id;
  const added = await call('POST', `/admin/projects/${other}/domains`, { hostname: 'd.example.com' });
  t.equal(added.status, 201, added.text);
  writeFileSync(path.join(dataDir, 'domains', 'd.example.com.json'), '{broken');
  t.equal((await call('DELETE', `/admin/projects/${project}/domains/d.example.com`)).status, 404, "another project's damaged domain is not this project's to remove");

  await portico.stop();
  portico = await startPortico({ PORTICO_DATA_DIR: dataDir, PORTICO_DNS_SERVERS: dns.dnsServer });
  t.same((await call('GET', `/admin/projects/${project}/domains`)).json, [], 'after a restart the removals hold');
  t.not(await served('a.example.com'), 200, 'and the damaged domain is not served');

  const stranger = (await call('POST', '/admin/accounts', { plan: 'pro' })).json.id;
  const theirs = (await call('POST', '/admin/projects', { accountId: stranger, name: 'theirs', upstream: upstream.url })).json.id;
  const claim = await call('POST', `/admin/projects/${theirs}/domains`, { hostname: 'a.example.com' });
  t.equal(claim.status, 201);
  t.ok(claim.json.records.some((r: { type: string }) => r.type === 'TXT'), 'another account adding it must prove ownership (the takeover guard remembers the owner)');
});
