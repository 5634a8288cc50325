// An order that takes longer than its lock's TTL keeps the lock: a second instance waits for the
// certificate instead of ordering the same name again (real pebble, the CA's validation answered
// 4 s late, a lock TTL of 1.2 s). The lock stores, the certs dir's (in memory) and Redis's (a real
// redis-server), extend only a lock the token still owns.
import t from 'tap';
import { openFileCertStores } from '../../src/certs/file-store.ts';
import { openRedisCertStores } from '../../src/certs/redis-store.ts';
import type { LockStore } from '../../src/certs/types.ts';
import { startManagerBed } from '../helpers/cert-manager.ts';
import { commandsOn, startRedis } from '../helpers/redis.ts';
import { cleanup, tempDir } from '../helpers/portico.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

t.test('an order that outlasts its lock\'s TTL keeps the lock: the other instance waits for its certificate, one order', async (t) => {
  // the keepalive runs every third of the TTL: a loaded machine may delay it by a few hundred ms
  const bed = await startManagerBed({ challengeDelayMs: 4000, lockTtlMs: 1200 });
  t.teardown(() => bed.stop());
  await bed.addVerified('slow.example.org');
  const first = bed.manager.obtain('slow.example.org', 'verified');
  await sleep(2800); // the first order is waiting for the CA's validation; its lock's TTL has passed twice
  const second = bed.another().obtain('slow.example.org', 'verified');
  const [a, b] = await Promise.all([first, second]);
  t.ok(a, 'the first instance got the certificate');
  t.equal(b?.certPem, a?.certPem, 'the second instance got the same one');
  t.equal(bed.pebble.orders(), 1, 'one order');
});

const server = await startRedis();
t.teardown(() => server.stop());
const commands = commandsOn(server.url, t);

const backends: Array<{ name: string; open(): LockStore }> = [
  {
    name: 'files',
    open() {
      const certsDir = tempDir('order-lock');
      t.teardown(() => cleanup(certsDir));
      return openFileCertStores(certsDir, 'https://ca.test/directory').locks;
    },
  },
  { name: 'redis', open: () => openRedisCertStores(commands, 'https://ca.test/directory').locks },
];

for (const backend of backends) {
  t.test(`${backend.name}: a lock is extended only while its token owns it`, async (t) => {
    const locks = backend.open();
    const token = await locks.acquire('cert:x.example.org', 200);
    t.ok(token, 'taken');
    t.equal(await locks.extend('cert:x.example.org', 'someone-else', 1000), false, 'not extended by another token');
    t.equal(await locks.extend('cert:x.example.org', token!, 1000), true, 'extended by its owner');
    await sleep(400);
    t.equal(await locks.acquire('cert:x.example.org', 200), null, 'still held after its first TTL');
    await locks.release('cert:x.example.org', token!);
    const next = await locks.acquire('cert:x.example.org', 100);
    t.ok(next, 'free once released');
    await sleep(250);
    t.equal(await locks.extend('cert:x.example.org', next!, 1000), false, 'an expired lock is not extended');
    t.ok(await locks.acquire('cert:x.example.org', 100), 'and another can take it');
  });
}
