// The embedded limiter's counts and bans across restarts of a real Portico on one data dir (DESIGN §8:
// the limiter is one of the embedded store's nouns). Before, every restart handed out a fresh day and
// lifted every ban: counts lived only in memory. A stop loses nothing; a kill -9 at most the counts of
// the last checkpoint interval (limiter-checkpoint.ts).
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { spawnPortico, tempDir, type Child } from '../helpers/portico.ts';
import { accountWithKey, api } from '../helpers/client.ts';
import { CHECKPOINT_MS } from '../../src/ratelimit/limiter-checkpoint.ts';

const dataDir = tempDir('limiter-restart');
const certsDir = tempDir('limiter-restart-certs');
const env = { PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir };
const start = async (): Promise<Child> => {
  const child = await spawnPortico(env);
  t.teardown(() => child.kill('SIGKILL'));
  return child;
};
const remaining = async (child: Child, key: string) => {
  const answer = await api(child.ports.https, child.ca, key, { path: '/v1/categories' });
  return { status: answer.status, remaining: Number(answer.headers['x-ratelimit-remaining']), code: (answer.json as { code?: string } | null)?.code };
};

let child = await start();
// a day of 20 (the window reported: fewest remaining), a minute of 1000
const { key } = await accountWithKey(child.ports.admin, 'enterprise', 'production', { perMinute: 1000, perDay: 20 });
const tight = await accountWithKey(child.ports.admin, 'enterprise', 'production', { perMinute: 1000, perDay: 2 });

t.test('a stop and a start on the same data dir: the day goes on where it was', async (t) => {
  for (let i = 0; i < 5; i++) await remaining(child, key);
  t.equal((await remaining(child, key)).remaining, 14, '6 calls of 20');
  t.equal(await child.kill('SIGTERM'), 0, 'stopped');
  child = await start();
  t.match(child.logs.join('\n'), /rate-limit counts and bans restored/);
  t.equal((await remaining(child, key)).remaining, 13, 'the 7th call: 13 left, not 19');
});

t.test('a ban outlives a restart', async (t) => {
  // 2 allowed, then more than 10 refusals within 60 s: banned for 15 minutes
  const statuses: string[] = [];
  for (let i = 0; i < 14; i++) statuses.push((await remaining(child, tight.key)).code ?? 'ok');
  t.equal(statuses.at(-1), 'key_banned', `banned (${statuses.join(' ')})`);
  await sleep(CHECKPOINT_MS + 500);
  await child.kill('SIGKILL');
  child = await start();
  t.equal((await remaining(child, tight.key)).code, 'key_banned', 'still banned after a kill -9');
});

t.test('a kill -9: counts older than the checkpoint interval are kept', async (t) => {
  const before = (await remaining(child, key)).remaining;
  await remaining(child, key);
  await sleep(CHECKPOINT_MS + 500);
  await child.kill('SIGKILL');
  child = await start();
  t.equal((await remaining(child, key)).remaining, before - 2, 'both calls made before the checkpoint still count');
});

t.test('a damaged counts file: a warning, and counting starts afresh', async (t) => {
  await child.kill('SIGTERM');
  writeFileSync(path.join(dataDir, 'limiter.json'), '{"subjects": [[');
  child = await start();
  t.match(child.logs.join('\n'), /the saved rate-limit counts cannot be read; every window and ban starts afresh/);
  t.equal((await remaining(child, key)).remaining, 19, 'a fresh day');
});
