// `portico serve --workers 2` whose workers cannot start (here: the HTTPS port is taken): the primary
// stops and exits 1 with the reason in the log, instead of forking replacements forever
// (start-failures.test.ts: the reason said once).
import t from 'tap';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import net from 'node:net';
import path from 'node:path';
import { baseEnv, tempDir, cleanup } from '../helpers/portico.ts';
import { freePort } from '../helpers/free-port.ts';
import { startRedis } from '../helpers/redis.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');

t.test('workers that cannot start: the primary exits 1 and says why', async (t) => {
  const redis = await startRedis();
  const dataDir = tempDir('data');
  const certsDir = tempDir('certs');
  t.teardown(async () => {
    await redis.stop();
    cleanup(dataDir);
    cleanup(certsDir);
  });
  // something else already listens on the HTTPS port (all addresses)
  const taken = net.createServer();
  await new Promise<void>((resolve) => taken.listen(0, resolve));
  t.teardown(() => new Promise<void>((resolve) => taken.close(() => resolve())));
  const env = baseEnv({
    PORTICO_HTTPS_PORT: String((taken.address() as net.AddressInfo).port),
    PORTICO_HTTP_PORT: String(await freePort()),
    PORTICO_ADMIN_PORT: String(await freePort()),
    PORTICO_REDIS_URL: redis.url,
    PORTICO_DATA_DIR: dataDir,
    PORTICO_CERTS_DIR: certsDir,
  });
  const child = spawn(process.execPath, [path.join(ROOT, 'src/cli/main.ts'), 'serve', '--workers', '2'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => void child.kill('SIGKILL'));
  const lines: string[] = [];
  createInterface({ input: child.stdout! }).on('line', (line) => lines.push(line));
  createInterface({ input: child.stderr! }).on('line', (line) => lines.push(line));
  const code = await Promise.race([
    new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c))),
    new Promise<'running'>((resolve) => setTimeout(() => resolve('running'), 20_000)),
  ]);
  t.equal(code, 1, `the primary exited 1 (log:\n${lines.slice(-10).join('\n')})`);
  const entries = lines.flatMap((line) => {
    try {
      return [JSON.parse(line) as { msg?: string; err?: { message?: string } }];
    } catch {
      return [];
    }
  });
  t.ok(entries.some((e) => e.msg === 'Portico could not start' && /EADDRINUSE/.test(JSON.stringify(e))), 'the primary logged the worker\'s reason (EADDRINUSE)');
  t.notOk(entries.some((e) => e.msg === 'a worker died; starting a replacement' || e.msg === 'a worker could not start; trying again'), 'no replacement was forked');
  t.ok(lines.some((line) => /^portico: the https listener cannot bind port \d+: .*EADDRINUSE/.test(line)), 'stderr says so too');
});
