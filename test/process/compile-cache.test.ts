// Start-up: the compile cache (src/cli/compile-cache.ts) is used when it can be and never stops a
// start when it cannot, and a start loads only what serving needs (no Redis client in embedded
// mode, no certificate generator once the fallback certificate exists).
import t from 'tap';
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';
import { compileCacheDir, makeDirectory } from '../../src/cli/compile-cache.ts';
import { spawnPortico, tempDir, cleanup, type Child } from '../helpers/portico.ts';

// `npm test` gives its processes a compile cache of their own (package.json); the Porticos here
// must choose theirs as a start does
delete process.env.NODE_COMPILE_CACHE;

t.test("the cache directory: the setting, off, or portico in the user's cache directory", async (t) => {
  const home = '/home/someone';
  t.equal(compileCacheDir({ PORTICO_COMPILE_CACHE: 'off' }, home), null);
  t.equal(compileCacheDir({ PORTICO_COMPILE_CACHE: '0' }, home), null);
  t.equal(compileCacheDir({ PORTICO_COMPILE_CACHE: '/var/cache/portico' }, home), '/var/cache/portico');
  t.equal(compileCacheDir({}, home), '/home/someone/.cache/portico');
  t.equal(compileCacheDir({ XDG_CACHE_HOME: '/srv/cache' }, home), '/srv/cache/portico', '$XDG_CACHE_HOME when set');
  t.equal(compileCacheDir({ XDG_CACHE_HOME: 'relative' }, home), '/home/someone/.cache/portico', 'a relative one is ignored, as its rule says');
  t.equal(compileCacheDir({}, ''), null, 'no home directory: no cache');
  t.equal(compileCacheDir({}, '/'), null, 'nor in /');
});

// DESIGN §1: `npm start` writes nothing into the checkout except under the data and certs dirs. The
// cache was `node_modules/.cache/portico` of the checkout.
t.test('by default the cache is made in the home directory, not in the checkout', async (t) => {
  const home = tempDir('home');
  t.teardown(() => cleanup(home));
  const child = await spawnPortico({ HOME: home, PORTICO_COMPILE_CACHE: '', XDG_CACHE_HOME: '' });
  t.teardown(() => cleanup(child.env.PORTICO_DATA_DIR, child.env.PORTICO_CERTS_DIR));
  await handshake(child);
  t.equal(await child.kill(), 0);
  const made = readdirSync(path.join(home, '.cache', 'portico'));
  t.ok(made.length > 0, `filled under $HOME/.cache/portico (${made.join(', ')})`);
});

t.test('makeDirectory creates what is missing and refuses what cannot be a directory', async (t) => {
  const dir = tempDir('mkdir');
  t.teardown(() => cleanup(dir));
  t.ok(makeDirectory(path.join(dir, 'a/b/c')));
  t.ok(existsSync(path.join(dir, 'a/b/c')));
  t.ok(makeDirectory(path.join(dir, 'a/b/c')), 'already there');
  writeFileSync(path.join(dir, 'file'), '');
  t.notOk(makeDirectory(path.join(dir, 'file')));
  t.notOk(makeDirectory(path.join(dir, 'file/sub')));
  // procfs answers ENOENT to mkdir under /proc: Node's recursive mkdir retries that forever
  if (existsSync('/proc/self')) t.notOk(makeDirectory('/proc/portico-test/cache'));
});

/** Every module this start compiled or read from the cache (Node's compile cache debug output). */
const compiled = (child: Child) => child.logs.filter((line) => line.startsWith('[compile cache]')).join('\n');

async function handshake(child: Child): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const socket = tls.connect({ port: child.ports.https, host: '127.0.0.1', servername: 'localhost', ca: child.ca }, () => {
      socket.end();
      resolve();
    });
    socket.on('error', reject);
  });
}

t.test('a start fills the cache, the next reads it; neither loads Redis, ACME or, once made, x509', async (t) => {
  const cache = tempDir('compile-cache');
  const dataDir = tempDir('data');
  const certsDir = tempDir('certs');
  t.teardown(() => cleanup(cache, dataDir, certsDir));
  const env = { PORTICO_COMPILE_CACHE: cache, PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir, NODE_DEBUG_NATIVE: 'COMPILE_CACHE' };

  const first = await spawnPortico(env);
  await handshake(first);
  t.equal(await first.kill(), 0);
  const firstLog = compiled(first);
  t.match(firstLog, /src\/main\.ts/, 'the server modules compile with the cache on');
  t.match(firstLog, /node_modules\/@peculiar\/x509\//, 'the first start makes the fallback certificate');
  const stored = readdirSync(cache);
  t.equal(stored.length, 1, 'one directory per Node version');
  t.ok(readdirSync(path.join(cache, stored[0])).length > 50, 'entries written');

  const second = await spawnPortico(env);
  await handshake(second);
  t.equal(await second.kill(), 0);
  const secondLog = compiled(second);
  t.match(secondLog, /V8 code cache for ESM file:\S+\/src\/main\.ts was accepted/);
  t.match(secondLog, /node_modules\/pino\//);
  t.notMatch(secondLog, /node_modules\/@peculiar\//, 'an existing fallback certificate is read, not parsed');
  t.notMatch(secondLog, /node_modules\/ioredis\//, 'embedded state: no Redis client');
  t.notMatch(secondLog, /node_modules\/acme-client\//, 'no ACME client before the first order');
});

t.test('an unusable cache directory never stops a start', async (t) => {
  const dir = tempDir('not-a-dir');
  t.teardown(() => cleanup(dir));
  writeFileSync(path.join(dir, 'file'), '');
  for (const cache of [path.join(dir, 'file'), path.join(dir, 'file/cache'), ...(existsSync('/proc/self') ? ['/proc/portico-test/cache'] : [])]) {
    const child = await spawnPortico({ PORTICO_COMPILE_CACHE: cache });
    t.teardown(() => cleanup(child.env.PORTICO_DATA_DIR, child.env.PORTICO_CERTS_DIR));
    await handshake(child);
    t.equal(await child.kill(), 0, cache);
  }
});
