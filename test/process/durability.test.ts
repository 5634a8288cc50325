// Embedded state survives kill -9 (DESIGN §8): whatever was acknowledged (201/200) is there after a
// restart on the same data dir, and category ids are never reused — also for creates that were in
// flight when the process died.
import t, { type Test } from 'tap';
import { spawnPortico, tempDir, cleanup, type Child } from '../helpers/portico.ts';
import { api, admin, accountWithKey } from '../helpers/client.ts';

const dataDir = tempDir('durability-data');
const certsDir = tempDir('durability-certs');
t.teardown(() => cleanup(dataDir, certsDir));

let current: Child | null = null;
t.teardown(async () => {
  await current?.kill('SIGKILL');
});

const start = async (): Promise<Child> => {
  current = await spawnPortico({ PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir });
  return current;
};

/** kill -9 at once (no graceful path), and wait until the process is reaped so its lock is stale */
const crash = async (t: Test, child: Child): Promise<void> => {
  process.kill(child.process.pid!, 'SIGKILL');
  await child.exited;
  t.equal(child.process.signalCode, 'SIGKILL', 'the process died of SIGKILL, not a clean exit');
};

const create = (child: Child, key: string, name: string) =>
  api(child.ports.https, child.ca, key, { method: 'POST', path: '/v1/categories', json: { name, description: `made as ${name}` } });

// every category id any client has ever seen; a new id must never be one of them, nor below them
const seen = new Set<number>();
const maxSeen = () => Math.max(0, ...seen);

let key = '';
let keyId = '';
let accountId = '';

t.test('an acknowledged account, key and category survive SIGKILL right after the 201', async (t) => {
  const first = await start();
  ({ key, keyId, accountId } = await accountWithKey(first.ports.admin, 'pro'));
  const created = await create(first, key, 'Dog');
  await crash(t, first);
  t.equal(created.status, 201);
  t.match(created.json, { id: Number, name: 'Dog' });
  const id = created.json.id as number;
  seen.add(id);

  const second = await start();
  const category = await api(second.ports.https, second.ca, key, { path: `/v1/categories/${id}` });
  t.equal(category.status, 200, 'the key still authenticates and the category is there');
  t.same(category.json, { id, name: 'Dog', description: 'made as Dog' });

  const account = await admin(second.ports.admin, 'GET', `/admin/accounts/${accountId}`);
  t.equal(account.status, 200, 'the account is there');
  t.match(account.json, { id: accountId, plan: 'pro', limits: { perMinute: 300, perDay: 10000 } });

  const list = await api(second.ports.https, second.ca, key, { path: '/v1/categories' });
  t.equal(list.status, 200);
  t.same(list.json.map((c: { id: number }) => c.id), [id]);

  const next = await create(second, key, 'Cat');
  t.equal(next.status, 201);
  t.ok(next.json.id > maxSeen(), `new id ${next.json.id} is above every earlier id (${maxSeen()})`);
  seen.add(next.json.id);
  await crash(t, second);
});

t.test('30 concurrent creates, SIGKILL right after all 201s: all 30 are there, ids unique', async (t) => {
  const child = await start();
  const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => create(child, key, `burst-${i}`)));
  await crash(t, child);
  t.same(answers.map((a) => a.status), Array(30).fill(201), 'every create answered 201');
  const ids = answers.map((a) => a.json.id as number);
  t.equal(new Set(ids).size, 30, 'ids are unique');
  for (const id of ids) t.notOk(seen.has(id), `id ${id} was not used before the restart`);
  t.ok(Math.min(...ids) > maxSeen(), 'ids continue above every id seen before the restart');
  for (const id of ids) seen.add(id);

  const again = await start();
  const list = await api(again.ports.https, again.ca, key, { path: '/v1/categories' });
  t.equal(list.status, 200);
  const byId = new Map<number, { name: string }>(list.json.map((c: { id: number; name: string }) => [c.id, c]));
  for (const [i, id] of ids.entries()) t.equal(byId.get(id)?.name, `burst-${i}`, `category ${id} (burst-${i}) survived`);
  t.same([...byId.keys()], [...byId.keys()].sort((a, b) => a - b), 'the list is in id order');
  await crash(t, again);
});

t.test('SIGKILL while 30 creates are in flight: every acknowledged one survives, no id is reused', async (t) => {
  const child = await start();
  const acknowledged = new Map<number, string>();
  let killed = false;
  const creates = Array.from({ length: 30 }, (_, i) =>
    create(child, key, `inflight-${i}`).then(
      (answer) => {
        if (answer.status === 201) {
          acknowledged.set(answer.json.id, `inflight-${i}`);
          // the first acknowledgement pulls the plug while the rest are still on their way
          if (!killed) {
            killed = true;
            process.kill(child.process.pid!, 'SIGKILL');
          }
        } else {
          t.fail(`unexpected answer ${answer.status} ${answer.text}`);
        }
      },
      (err: NodeJS.ErrnoException) => err.code ?? err.message, // cut off by the kill: unacknowledged
    ),
  );
  await Promise.all(creates);
  await child.exited;
  t.equal(child.process.signalCode, 'SIGKILL');
  t.ok(acknowledged.size >= 1, `${acknowledged.size} creates were acknowledged before the kill`);
  t.comment(`${acknowledged.size} of 30 acknowledged before SIGKILL`);
  for (const id of acknowledged.keys()) t.notOk(seen.has(id), `acknowledged id ${id} was never handed out before`);
  for (const id of acknowledged.keys()) seen.add(id);

  const again = await start();
  const list = await api(again.ports.https, again.ca, key, { path: '/v1/categories' });
  t.equal(list.status, 200);
  const present = new Map<number, string>(list.json.map((c: { id: number; name: string }) => [c.id, c.name]));
  for (const [id, name] of acknowledged) t.equal(present.get(id), name, `acknowledged category ${id} (${name}) survived`);
  for (const [id, name] of present) {
    if (!name.startsWith('inflight-')) t.ok(seen.has(id), `earlier category ${id} is one we created`);
  }
  const earlier = [...seen].filter((id) => !acknowledged.has(id));
  for (const id of earlier) t.ok(present.has(id), `category ${id} from before is still there`);
  // unacknowledged creates may or may not have made it; either way their ids count as seen now
  for (const id of present.keys()) seen.add(id);

  const fresh = await Promise.all(Array.from({ length: 5 }, (_, i) => create(again, key, `after-${i}`)));
  t.same(fresh.map((a) => a.status), Array(5).fill(201));
  const freshIds = fresh.map((a) => a.json.id as number);
  t.equal(new Set(freshIds).size, 5, 'new ids are unique');
  for (const id of freshIds) {
    t.notOk(seen.has(id), `new id ${id} collides with no id seen before`);
    t.ok(id > maxSeen(), `new id ${id} is above every id seen before (${maxSeen()})`);
  }

  const revoked = await admin(again.ports.admin, 'DELETE', `/admin/keys/${keyId}`);
  t.equal(revoked.status, 204);
  await crash(t, again);
  const last = await start();
  const refused = await api(last.ports.https, last.ca, key, { path: '/v1/categories' });
  t.equal(refused.status, 401, 'an acknowledged revocation survives SIGKILL too');
  await last.kill('SIGTERM');
});

t.test('two processes started at the same moment on one fresh data dir: exactly one runs, the other exits saying why', async (t) => {
  const fresh = tempDir('durability-race');
  const certs = tempDir('durability-race-certs');
  t.teardown(() => cleanup(fresh, certs));
  const env = { PORTICO_DATA_DIR: fresh, PORTICO_CERTS_DIR: certs };
  const outcomes = await Promise.allSettled([spawnPortico(env), spawnPortico(env)]);
  const running = outcomes.filter((o): o is PromiseFulfilledResult<Child> => o.status === 'fulfilled').map((o) => o.value);
  t.teardown(() => Promise.all(running.map((c) => c.kill('SIGKILL'))));
  const refused = outcomes.filter((o): o is PromiseRejectedResult => o.status === 'rejected').map((o) => String((o.reason as Error).message));
  t.equal(running.length, 1, 'exactly one runs');
  t.equal(refused.length, 1, 'the other does not');
  t.match(refused[0], /exited with [1-9]\d* before listening/, 'it exited non-zero');
  t.match(refused[0], new RegExp(`${fresh.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is in use by process ${running[0]?.process.pid}`), 'naming the data dir and the process that owns it');
  t.equal((await admin(running[0].ports.admin, 'GET', '/readyz')).status, 200, 'the one that runs is ready');
});
