// One contract, every backend (STYLE §4, DESIGN §8): the shared cases (contract-cases.ts) run here
// against the embedded store (memory + durable log in a temp data dir) and one Redis (a real
// redis-server); contract-sentinel.test.ts and contract-cluster.test.ts run them on those topologies.
// What only one backend has (the data-dir lock; pub/sub, fallback reads, the 60 s cache) follows.
import t, { type Test } from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Redis } from 'ioredis';
import { openEmbeddedStores } from '../../src/state/embedded.ts';
import { connectRedis, openRedisStores } from '../../src/state/redis.ts';
import type { Stores } from '../../src/state/types.ts';
import { account, apiKey, contract, CREATED, REVOKED, type Backend } from './contract-cases.ts';
import { cleanup, tempDir } from '../helpers/portico.ts';
import { startRedis, type RedisServer } from '../helpers/redis.ts';

// generous: 100 concurrent creates on a busy 2-core test machine
const COMMAND_TIMEOUT_MS = 1000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Polls `read` until it returns `expected` (compared as JSON) or `withinMs` passes; returns the last
 * value. Pub/sub delivery takes a few ms; without it the other instance's cache would answer stale
 * for 60 s, so a 1 s bound still tells the two apart without flaking on a busy machine.
 */
async function eventually<T>(read: () => Promise<T>, expected: unknown, withinMs = 1000): Promise<T> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const value = await read();
    if (JSON.stringify(value) === JSON.stringify(expected) || Date.now() > deadline) return value;
    await sleep(10);
  }
}


const server = await startRedis();
t.teardown(() => server.stop());
const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
admin.on('error', () => undefined);
t.teardown(() => admin.disconnect());

/** Redis stores on `url`, closed in teardown. */
async function redisStores(t: Test, url: string, timeoutMs = COMMAND_TIMEOUT_MS, now?: () => number): Promise<Stores> {
  const conns = connectRedis(url, timeoutMs);
  await Promise.all([conns.client, conns.subscriber].map((c) => (c.status === 'ready' ? undefined : new Promise((r) => c.once('ready', r)))));
  const stores = await openRedisStores(conns, now);
  t.teardown(() => stores.close());
  return stores;
}

async function embeddedAt(t: Test, dataDir: string): Promise<Stores> {
  const stores = await openEmbeddedStores(dataDir);
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await stores.close();
  };
  t.teardown(close);
  return { ...stores, close };
}

const backends: Backend[] = [
  {
    name: 'embedded',
    async open(t) {
      const dataDir = tempDir('state');
      t.teardown(() => cleanup(dataDir));
      let current = await embeddedAt(t, dataDir);
      return {
        stores: current,
        async again() {
          await current.close();
          current = await embeddedAt(t, dataDir);
          return current;
        },
      };
    },
  },
  {
    name: 'redis',
    async open(t) {
      // subtests run one at a time; each starts from an empty server
      await admin.flushall();
      return { stores: await redisStores(t, server.url), again: () => redisStores(t, server.url) };
    },
  },
];

for (const backend of backends) contract(backend);

t.test('embedded only', async (t) => {
  t.test('one process owns the data dir: a second open rejects with DATA_DIR_LOCKED until close', async (t) => {
    const dataDir = tempDir('state-lock');
    t.teardown(() => cleanup(dataDir));
    const first = await openEmbeddedStores(dataDir);
    let firstClosed = false;
    t.teardown(() => (firstClosed ? undefined : first.close()));
    await first.categories.create('production', { name: 'owned' }, 10);

    // Same process too: two Tables on one log would hand out the same category id twice.
    const refused = await openEmbeddedStores(dataDir).then(
      async (second) => {
        await second.close();
        return null;
      },
      (err: unknown) => err as Error & { code?: string },
    );
    t.equal(refused?.code, 'DATA_DIR_LOCKED', 'a second open in the same process is refused');

    await first.close();
    firstClosed = true;
    const second = await openEmbeddedStores(dataDir);
    t.teardown(() => second.close());
    t.strictSame((await second.categories.list('production')).map((c) => c.name), ['owned']);
  });

  // another container on the same volume: its own pid namespace, where the owner's pid names nothing
  const unshare = spawnSync('unshare', ['--pid', '--fork', '--mount-proc', 'true']).status === 0;
  t.test('another process cannot open a data dir this process holds, in another pid namespace either', async (t) => {
    const dataDir = tempDir('state-lock-proc');
    t.teardown(() => cleanup(dataDir));
    const stores = await openEmbeddedStores(dataDir);
    let closed = false;
    t.teardown(() => (closed ? undefined : stores.close()));

    const module = path.resolve(import.meta.dirname, '../../src/state/embedded.ts');
    const script = `
      import { openEmbeddedStores } from ${JSON.stringify(module)};
      try { const s = await openEmbeddedStores(${JSON.stringify(dataDir)}); await s.close(); console.log('OPENED', process.pid); }
      catch (err) { console.log(err.code); }`;
    const run = (wrapper: string[] = []) =>
      new Promise<string>((resolve, reject) => {
        const [command, ...args] = [...wrapper, process.execPath, '--input-type=module', '-e', script];
        const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'inherit'] });
        let out = '';
        child.stdout.on('data', (chunk) => (out += chunk));
        child.once('error', reject);
        child.once('exit', () => resolve(out.trim()));
      });
    const namespaced = ['unshare', '--pid', '--fork', '--mount-proc'];
    t.equal(await run(), 'DATA_DIR_LOCKED', 'refused while held');
    if (unshare) t.equal(await run(namespaced), 'DATA_DIR_LOCKED', 'refused in a pid namespace of its own');
    else t.comment('unshare --pid needs root and util-linux: the other pid namespace is not tried');
    await stores.close();
    closed = true;
    t.match(await run(), /^OPENED \d+$/, 'opens once released');
    if (unshare) t.equal(await run(namespaced), 'OPENED 1', 'and as pid 1 of its own namespace');
  });

  t.test('the lock of a process killed with kill -9 is free at once; its note is replaced', async (t) => {
    const dataDir = tempDir('state-stale-lock');
    t.teardown(() => cleanup(dataDir));
    const module = path.resolve(import.meta.dirname, '../../src/state/embedded.ts');
    const holder = spawn(process.execPath, ['--input-type=module', '-e', `
      import { openEmbeddedStores } from ${JSON.stringify(module)};
      await openEmbeddedStores(${JSON.stringify(dataDir)});
      console.log('OPENED');
      setInterval(() => {}, 1000);`], { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise((resolve) => holder.once('exit', resolve));
    await new Promise<void>((resolve) => holder.stdout.on('data', (chunk: Buffer) => chunk.toString().includes('OPENED') && resolve()));
    t.equal(readFileSync(path.join(dataDir, 'portico.lock'), 'utf8').split(' ')[0], String(holder.pid), 'the note names the owner');
    const refused = await openEmbeddedStores(dataDir).then(async (s) => (await s.close(), null), (err: Error & { code?: string }) => err);
    t.equal(refused?.code, 'DATA_DIR_LOCKED', 'refused while the owner lives');
    t.match(refused?.message, `in use by process ${holder.pid}`, 'the refusal names the owner');
    holder.kill('SIGKILL');
    await exited;
    t.same(readdirSync(dataDir).filter((name) => name.startsWith('portico.owner')), ['portico.owner'], 'the lock file alone, no journal beside it');
    const stores = await openEmbeddedStores(dataDir);
    t.teardown(() => stores.close());
    t.equal(await stores.health(), 'ok');
    t.equal(readFileSync(path.join(dataDir, 'portico.lock'), 'utf8').split(' ')[0], String(process.pid), 'the dead owner\'s note is replaced');
  });

  t.test('a lock file that is not Portico\'s stops the open with a message, and is left as it was', async (t) => {
    const dataDir = tempDir('state-lock-foreign');
    t.teardown(() => cleanup(dataDir));
    const foreign = 'not a lock: someone else\'s file, long enough to hold a database header\n'.repeat(2);
    writeFileSync(path.join(dataDir, 'portico.owner'), foreign);
    await t.rejects(openEmbeddedStores(dataDir), /cannot take the lock of .*portico\.owner.*not the file Portico makes: remove it if no Portico runs on this data dir/);
    t.equal(readFileSync(path.join(dataDir, 'portico.owner'), 'utf8'), foreign, 'the file is untouched');
  });

  t.test('an open that fails after taking the lock gives it back', async (t) => {
    const dataDir = tempDir('state-lock-note');
    t.teardown(() => cleanup(dataDir));
    mkdirSync(path.join(dataDir, 'portico.lock')); // the note cannot be written
    await t.rejects(openEmbeddedStores(dataDir), { code: 'EISDIR' });
    rmSync(path.join(dataDir, 'portico.lock'), { recursive: true });
    const stores = await openEmbeddedStores(dataDir);
    t.teardown(() => stores.close());
    t.equal(await stores.health(), 'ok', 'the lock was free again');
  });

  t.test('a process on its way to the lock (holding it shared for a moment) does not make the open give up', async (t) => {
    const dataDir = tempDir('state-lock-shared');
    t.teardown(() => cleanup(dataDir));
    // what every starting process does before it asks for the exclusive lock: read the file under a shared lock
    const reader = spawn(process.execPath, ['-e', `
      const { DatabaseSync } = require('node:sqlite');
      const db = new DatabaseSync(${JSON.stringify(path.join(dataDir, 'portico.owner'))});
      db.exec('BEGIN'); db.prepare('SELECT count(*) FROM sqlite_master').get();
      console.log('HELD');
      setTimeout(() => { db.exec('COMMIT'); db.close(); }, 200);`], { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise((resolve) => reader.once('exit', resolve));
    await new Promise<void>((resolve) => reader.stdout.on('data', (chunk: Buffer) => chunk.toString().includes('HELD') && resolve()));
    const stores = await openEmbeddedStores(dataDir);
    t.teardown(() => stores.close());
    t.equal(await stores.health(), 'ok', 'the open waited for the shared hold to end and owns the data dir');
    await exited;
  });

  t.test('several processes starting together, over a dead process\'s note: exactly one owns the data dir', async (t) => {
    const module = path.resolve(import.meta.dirname, '../../src/state/embedded.ts');
    const PROCESSES = 6;
    for (let round = 0; round < 3; round++) {
      const dataDir = tempDir('state-lock-race');
      t.teardown(() => cleanup(dataDir));
      const dead = spawn(process.execPath, ['-e', ''], { stdio: 'ignore' });
      await new Promise((resolve) => dead.once('exit', resolve));
      writeFileSync(path.join(dataDir, 'portico.lock'), `${dead.pid} 0123456789abcdef`);
      // every child loads first, then all open at the same moment; the owner holds the lock until every
      // child has answered (its stdin ends), so a late refusal cannot turn into a second owner
      const at = Date.now() + 2500;
      const script = `
        import { openEmbeddedStores } from ${JSON.stringify(module)};
        while (Date.now() < ${at}) {}
        try {
          const s = await openEmbeddedStores(${JSON.stringify(dataDir)});
          console.log('OPENED');
          process.stdin.resume().once('end', () => s.close());
        } catch (err) { console.log(err.code ?? err.message); }`;
      const children = Array.from({ length: PROCESSES }, () => spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['pipe', 'pipe', 'inherit'] }));
      const exits = children.map((child) => new Promise((resolve) => child.once('exit', resolve)));
      const outcomes = await Promise.all(children.map((child) => new Promise<string>((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (chunk) => {
          out += chunk;
          if (out.includes('\n')) resolve(out.trim());
        });
        child.once('error', reject);
        child.once('exit', () => resolve(out.trim()));
      })));
      // a refused child has exited: its end of the pipe is gone (EPIPE is no failure here)
      for (const child of children) child.stdin.on('error', () => undefined).end();
      await Promise.all(exits);
      t.equal(outcomes.filter((o) => o === 'OPENED').length, 1, `round ${round + 1}: one owner (${outcomes.join(', ')})`);
      t.equal(outcomes.filter((o) => o === 'DATA_DIR_LOCKED').length, PROCESSES - 1, 'the others are refused');
      t.same(readdirSync(dataDir).filter((name) => name.startsWith('portico.lock')), [], 'the owner removed its note when it closed');
    }
  });
});

t.test('redis only', async (t) => {
  t.test('an idempotency key is free again 24 hours after its first use', async (t) => {
    await admin.flushall();
    const stores = await redisStores(t, server.url);
    const once = { accountId: 'acct_1', key: 'day-old' };
    const first = await stores.categories.createOnce('production', { name: 'Then' }, 100, once);
    t.equal(await stores.categories.createOnce('production', { name: 'Now' }, 100, once), 'key_reused');
    // the key's record, as if made 24 hours and a second ago
    const hash = 'portico:categories:production:once';
    const [field] = await admin.hkeys(hash);
    const [id, , fields] = (await admin.hget(hash, field))!.split('\n');
    await admin.hset(hash, field, `${id}\n${Date.now() - 24 * 3_600_000 - 1_000}\n${fields}`);
    const second = await stores.categories.createOnce('production', { name: 'Now' }, 100, once);
    t.match(second, { name: 'Now' }, 'a new category');
    t.not((second as { id: number }).id, (first as { id: number }).id);
    t.same(await stores.categories.createOnce('production', { name: 'Now' }, 100, once), { replayed: second }, 'remembered from its new first use');
  });

  t.test('a revoke on instance A is seen at once by B, which had the key cached', async (t) => {
    await admin.flushall();
    const a = await redisStores(t, server.url);
    const b = await redisStores(t, server.url);
    const key = apiKey('key_shared', 'acct_1');
    await a.keys.create(key);
    t.strictSame(await b.keys.findByHash(key.hash), key, 'B caches the live key');
    t.strictSame(await b.keys.findByHash(key.hash), key);

    await a.keys.revoke('key_shared', REVOKED);
    const revoked = { ...key, revokedAt: REVOKED };
    t.strictSame(await eventually(() => b.keys.findByHash(key.hash), revoked), revoked);
  });

  t.test('a key created on A after B cached "unknown" for its hash becomes visible on B', async (t) => {
    await admin.flushall();
    const a = await redisStores(t, server.url);
    const b = await redisStores(t, server.url);
    const key = apiKey('key_late', 'acct_1');
    t.equal(await b.keys.findByHash(key.hash), null, 'B caches unknown');
    await a.keys.create(key);
    t.strictSame(await eventually(() => b.keys.findByHash(key.hash), key), key);
  });

  t.test('a category created on A shows in the list B had cached', async (t) => {
    await admin.flushall();
    const a = await redisStores(t, server.url);
    const b = await redisStores(t, server.url);
    t.strictSame(await b.categories.list('production'), [], 'B caches the empty list');
    const c = await a.categories.create('production', { name: 'shared' }, 10);
    t.strictSame(await eventually(() => b.categories.list('production'), [c]), [c]);
    t.strictSame(await b.categories.list('staging'), []);
  });

  t.test('cached entries live at most 60 s, even when the message was missed', async (t) => {
    await admin.flushall();
    let clock = Date.parse(CREATED);
    const b = await redisStores(t, server.url, COMMAND_TIMEOUT_MS, () => clock);
    const key = apiKey('key_ttl', 'acct_1');
    // written without a notice: B's own notice for a key it creates would also drop its copy
    await admin.set('portico:key:key_ttl', JSON.stringify(key));
    await admin.set(`portico:keyhash:${key.hash}`, 'key_ttl');
    t.strictSame(await b.keys.findByHash(key.hash), key);
    // a revoke written by something that never published (a lost pub/sub message)
    await admin.set('portico:key:key_ttl', JSON.stringify({ ...key, revokedAt: REVOKED }));
    clock += 59_000;
    t.strictSame(await b.keys.findByHash(key.hash), key, 'still cached at 59 s');
    clock += 1_001;
    t.strictSame(await b.keys.findByHash(key.hash), { ...key, revokedAt: REVOKED }, 'read again after 60 s');
  });

  t.test('with Redis killed: cached reads answer, writes reject fast; after restart writes work', async (t) => {
    const own: RedisServer = await startRedis();
    t.teardown(() => own.stop());
    const stores = await redisStores(t, own.url, 250);
    const key = apiKey('key_down', 'acct_1');
    await stores.accounts.create(account('acct_1'));
    await stores.keys.create(key);
    const cat = await stores.categories.create('production', { name: 'kept' }, 10);
    t.strictSame(await stores.keys.findByHash(key.hash), key, 'read once: cached');
    t.strictSame(await stores.categories.list('production'), [cat], 'read once: cached');

    await own.kill();
    t.strictSame(await stores.keys.findByHash(key.hash), key, 'a known key still answers');
    t.strictSame(await stores.categories.list('production'), [cat], 'a read list still answers');
    t.equal(await stores.health(), 'down');

    const writes: Array<[string, () => Promise<unknown>]> = [
      ['accounts.create', () => stores.accounts.create(account('acct_2'))],
      ['accounts.update', () => stores.accounts.update(account('acct_1', 'pro'))],
      ['keys.create', () => stores.keys.create(apiKey('key_new', 'acct_1'))],
      ['keys.revoke', () => stores.keys.revoke('key_down', REVOKED)],
      ['categories.create', () => stores.categories.create('production', { name: 'lost' }, 10)],
    ];
    for (const [name, write] of writes) {
      const started = performance.now();
      await t.rejects(write(), { code: 'STATE_UNAVAILABLE' }, `${name} rejects`);
      const took = performance.now() - started;
      t.ok(took < 1000, `${name} rejected in ${Math.round(took)} ms`);
    }

    await own.restart();
    const deadline = Date.now() + 3000;
    let last: unknown = null;
    for (;;) {
      try {
        await stores.accounts.create(account('acct_3'));
        break;
      } catch (err) {
        last = err;
        if (Date.now() > deadline) throw new Error('writes did not come back within 3 s', { cause: last });
        await sleep(100);
      }
    }
    t.strictSame(await stores.accounts.get('acct_3'), account('acct_3'));
    const after = await stores.categories.create('production', { name: 'back' }, 10);
    t.not(after, 'full');
    t.equal(await stores.health(), 'ok');
  });

  t.test('many commands waiting for a reconnect: one listener, no MaxListenersExceededWarning', async (t) => {
    const own: RedisServer = await startRedis();
    t.teardown(() => own.stop());
    const stores = await redisStores(t, own.url, 1000);
    await stores.accounts.create(account('acct_wait'));
    const warnings: string[] = [];
    const onWarning = (warning: Error) => void warnings.push(`${warning.name}: ${warning.message}`);
    process.on('warning', onWarning);
    t.teardown(() => void process.off('warning', onWarning));
    // the connection is lost; 40 reads made in its first second wait for it (within the command timeout)
    await own.kill();
    await sleep(50);
    const reads = Array.from({ length: 40 }, (_, i) => stores.accounts.get(i === 0 ? 'acct_wait' : `acct_none_${i}`).then((a) => a, (err: { code?: string }) => err.code));
    await sleep(100);
    await own.restart();
    const answers = await Promise.all(reads);
    t.ok(answers.every((a) => a === null || a === 'STATE_UNAVAILABLE' || (typeof a === 'object' && a.id === 'acct_wait')), `each read answers or says the state is unavailable (${JSON.stringify(answers.slice(0, 3))})`);
    await sleep(50);
    t.same(warnings.filter((w) => /MaxListeners/.test(w)), [], 'no listener warning');
  });

  t.test('a change notice right before Redis dies: the list and the plan answer from the last copy, a revoked key as revoked', async (t) => {
    const own: RedisServer = await startRedis();
    t.teardown(() => own.stop());
    const a = await redisStores(t, own.url, 250);
    const b = await redisStores(t, own.url, 250);
    const key = apiKey('key_notice', 'acct_n');
    await a.accounts.create(account('acct_n', 'pro'));
    await a.keys.create(key);
    const first = await a.categories.create('production', { name: 'first' }, 10);
    if (first === 'full') throw new Error('unexpected full');
    // B reads everything once, and A its own list
    t.strictSame(await b.categories.list('production'), [first]);
    t.strictSame(await a.categories.list('production'), [first]);
    t.strictSame(await b.accounts.get('acct_n'), account('acct_n', 'pro'));
    t.strictSame(await b.keys.findByHash(key.hash), key);
    // A changes the list, the plan and the key; B gets a notice for each
    const second = await a.categories.create('production', { name: 'second' }, 10);
    if (second === 'full') throw new Error('unexpected full');
    await a.accounts.update(account('acct_n', 'business'));
    await a.keys.revoke('key_notice', REVOKED);
    await sleep(200);
    await own.kill();

    t.strictSame(await b.categories.list('production'), [first], 'B\'s list answers from its last copy (it had not seen the second)');
    t.strictSame(await b.categories.get('production', first.id), first, 'a category in that copy answers');
    // it answered null (404 "No category with id …") for a category acknowledged 201 on A
    await t.rejects(b.categories.get('production', second.id), { code: 'STATE_UNAVAILABLE' }, 'one not in it is unknown, not "none": it may have been made since');
    t.strictSame(await b.accounts.get('acct_n'), account('acct_n', 'pro'), 'so does the account');
    // it was unknown (503) on B: the notice now says it was revoked, so B refuses it as revoked (401)
    t.match(await b.keys.findByHash(key.hash), { id: 'key_notice', revokedAt: REVOKED }, 'the revoked key is answered as revoked, never from the old copy');
    t.match(await a.keys.findByHash(key.hash), { revokedAt: REVOKED }, 'A knows it is revoked');
    // A's own list left out the category A had just made: the newest A has seen now holds it
    t.strictSame(await a.categories.list('production'), [first, second], "A's list holds the category it made");
    t.strictSame(await a.categories.get('production', second.id), second);
  });
});
