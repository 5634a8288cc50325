// Creates whose connection to Redis is cut mid-way. A project create was two steps: the name claimed
// (SET NX), then the project written (MULTI); cut between them, the name stayed claimed by a project
// that never existed, and every later create of that name answered 409 `name_taken`. A domain create
// too: the domain claimed, then its status, project set and timeline; cut between them, the hostname
// was taken (409) by a domain in no project's list. Each is now one script: applied whole or not at
// all, and the create can be made again.
// A relay on loopback between the store and a real redis-server drops the connection, once, instead of
// forwarding the first command that carries a marker: what the second step wrote.
import t from 'tap';
import { connectRedis, openRedisStores } from '../../src/state/redis.ts';
import { startRedis } from '../helpers/redis.ts';
import { startRelay } from '../helpers/tcp-relay.ts';

const NAME = 'cut-shop';
const HOSTNAME = 'cut.example.com';

const redis = await startRedis();
t.teardown(() => redis.stop());

let cuts = 0;
// the marker of the next cut; null: none
let cutOn: string | null = null;
const relay = await startRelay(() => redis.port, (link) => ({
  up(bytes, send) {
    if (cutOn === null || !bytes.toString('latin1').includes(cutOn)) return send(bytes);
    cutOn = null;
    cuts++;
    link.cut();
  },
}));
t.teardown(() => relay.close());

const conns = connectRedis(`redis://127.0.0.1:${relay.port}`, { commandTimeoutMs: 1000 });
await new Promise((resolve) => (conns.client.status === 'ready' ? resolve(undefined) : conns.client.once('ready', resolve)));
const stores = await openRedisStores(conns);
t.teardown(() => stores.close());
const project = { id: 'prj_cut', accountId: 'acc_1', name: NAME, upstream: 'http://127.0.0.1:9', createdAt: '2026-11-29T00:00:00.000Z' };

/** `create` once more until Redis answers (ioredis connects again by itself after the cut) */
async function again<T>(create: () => Promise<T>): Promise<T | 'failed'> {
  for (let i = 0; i < 20; i++) {
    try {
      return await create();
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
  }
  return 'failed';
}

t.test('a project create cut off mid-way leaves nothing behind: made again, it is made', async (t) => {
  cutOn = `"name":"${NAME}"`;
  await t.rejects(stores.projects.create(project), { code: 'STATE_UNAVAILABLE' }, 'the create is cut off');
  t.equal(cuts, 1);
  t.equal(await again(() => stores.projects.create(project)), null, 'made again, it is made (not name_taken)');
  t.same(await stores.projects.get(project.id), project);
  t.same((await stores.projects.list()).map((p) => p.name), [NAME]);
});

t.test('a domain create cut off mid-way leaves nothing behind: made again, it is listed and counted', async (t) => {
  const domain = { hostname: HOSTNAME, projectId: project.id, accountId: project.accountId, status: 'pending', records: [], diagnostics: [], createdAt: '2026-11-29T00:00:00.000Z', certificate: { status: 'none' } } as unknown as Parameters<typeof stores.domains.create>[0];
  cutOn = `portico:project:${project.id}:domains`;
  await t.rejects(stores.domains.create(domain, []), { code: 'STATE_UNAVAILABLE' }, 'the create is cut off');
  t.equal(cuts, 2);
  t.equal(await again(() => stores.domains.create(domain, [])), null, 'made again, it is made (not taken)');
  t.same((await stores.domains.listByProject(project.id)).map((d) => d.hostname), [HOSTNAME], 'in its project\'s list');
  t.match(await stores.domains.countByStatus(), { pending: 1 }, 'and counted');
});
