// The embedded domain index on disk (DESIGN §8, §9): changes go to domains.log, are folded into the
// sorted domains.index once the log passes its bound, and a restart reads both back — also after a
// crash between writing the new index and starting the new log. Real files in temp dirs.
import t, { type Test } from 'tap';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { openEmbeddedStores } from '../../src/state/embedded.ts';
import type { Domain, DomainStatus, Stores } from '../../src/state/types.ts';
import { cleanup, tempDir } from '../helpers/portico.ts';

const CREATED = '2025-03-10T08:30:00.000Z';

function dataDir(t: Test): string {
  const dir = tempDir('embedded-domains');
  t.teardown(() => cleanup(dir));
  return dir;
}

const domainOf = (i: number, status: DomainStatus = 'pending'): Domain => ({
  hostname: `d${i}.example.com`,
  projectId: `prj_${i % 3}`,
  accountId: 'acc_1',
  primary: false,
  status,
  apex: false,
  records: [],
  diagnostics: [],
  certificate: { status: 'none' },
  createdAt: new Date(Date.parse(CREATED) + i * 1000).toISOString(),
});

/** 30 domains added, 20 of them verified (every fourth redirects), 5 removed: what each store must show */
async function workload(t: Test, stores: Stores): Promise<void> {
  for (let i = 0; i < 30; i++) t.equal(await stores.domains.create(domainOf(i)), null);
  for (let i = 0; i < 20; i++) {
    const domain = { ...domainOf(i, 'verified'), ...(i % 4 === 0 ? { redirect: { to: 'd1.example.com', status: 301 as const } } : {}) };
    await stores.domains.update(domain);
  }
  for (let i = 25; i < 30; i++) await stores.domains.remove(`d${i}.example.com`, CREATED);
}

async function expectWorkload(t: Test, stores: Stores): Promise<void> {
  for (let i = 0; i < 30; i++) {
    const hostname = `d${i}.example.com`;
    const route = stores.domains.indexedRoute(hostname);
    if (i < 20) t.same(route, { projectId: `prj_${i % 3}`, ...(i % 4 === 0 ? { redirect: { to: 'd1.example.com', status: 301 } } : {}) }, `${hostname} routed`);
    else t.equal(route, null, `${hostname} not routed`);
    t.equal((await stores.domains.get(hostname))?.status ?? null, i < 20 ? 'verified' : i < 25 ? 'pending' : null);
  }
  t.same(await stores.domains.countByStatus(), { pending: 5, verified: 20, failed: 0 });
  t.same((await stores.domains.listByProject('prj_1')).map((d) => d.hostname), [1, 4, 7, 10, 13, 16, 19, 22].map((i) => `d${i}.example.com`), 'a project lists its domains in creation order');
}

t.test('changes fold into domains.index past the bound; a restart sees the same domains', async (t) => {
  const dir = dataDir(t);
  const stores = await openEmbeddedStores(dir, { domainsCompactAt: 8 });
  await workload(t, stores);
  await expectWorkload(t, stores);
  await stores.close();
  t.ok(existsSync(path.join(dir, 'domains.index')), 'the index was written');
  const logLines = readFileSync(path.join(dir, 'domains.log'), 'utf8').split('\n').filter(Boolean).length;
  // a fold is requested by the append that finds the log at its bound, so up to 8 records can follow the last one
  t.ok(logLines <= 8, `the log holds only what came after the last fold (${logLines} of 55 records)`);

  const again = await openEmbeddedStores(dir);
  t.teardown(() => again.close());
  await expectWorkload(t, again);
});

t.test('a crash after the new index is written but before the log starts over loses nothing', async (t) => {
  const dir = dataDir(t);
  // the log cannot be rewritten (its temp file name is taken), as if the process died right after the index
  mkdirSync(path.join(dir, 'domains.log.compact'), { recursive: true });
  const stores = await openEmbeddedStores(dir, { domainsCompactAt: 8 });
  await workload(t, stores);
  await stores.close();
  t.ok(existsSync(path.join(dir, 'domains.index')), 'the index was written');
  t.equal(readFileSync(path.join(dir, 'domains.log'), 'utf8').split('\n').filter(Boolean).length, 30 + 20 + 5, 'the old log is still whole');

  const again = await openEmbeddedStores(dir);
  t.teardown(() => again.close());
  await expectWorkload(t, again);
});

t.test('a damaged index is refused, not read as empty', async (t) => {
  const dir = dataDir(t);
  const stores = await openEmbeddedStores(dir, { domainsCompactAt: 8 });
  await workload(t, stores);
  await stores.close();
  const file = path.join(dir, 'domains.index');
  const bytes = readFileSync(file);
  bytes[bytes.length - 2] ^= 0xff;
  writeFileSync(file, bytes);
  await t.rejects(openEmbeddedStores(dir), /domains\.index; refusing to start/);
});
