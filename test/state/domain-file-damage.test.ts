// Regression: one unreadable domain file (`{broken` in data/domains/<hostname>.json) made every admin
// read of its project answer 500: the project, its domain list, each domain. Now that domain alone
// fails (500, the file named in the error log); the project's lists answer with the other domains and
// the error log names the damaged file once, until it reads again. A real Portico on real files.
import t from 'tap';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { startPortico, cleanup, tempDir } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';

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
