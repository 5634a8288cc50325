// routes-reload-not-retried: when the change-notice subscriber reconnects, an instance reloads its
// routes (it may have missed notices meanwhile). After a failover the subscriber can be back before
// reads work again; that reload failed, was logged once and never tried again, so a project changed
// while the notices were missed kept its old upstream on this instance until the next notice or a
// restart. Here, on a real Redis: the project's upstream is changed in Redis with no notice (one this
// instance missed), reads are refused (an ACL without @read) while the subscriber's connection is cut
// and made again, then allowed again.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { startPortico } from '../helpers/portico.ts';
import { admin, accountWithKey, request } from '../helpers/client.ts';
import { startRedis } from '../helpers/redis.ts';
import { startUpstream } from '../helpers/upstream.ts';

const redis = await startRedis();
t.teardown(() => redis.stop());
const cli = (...args: string[]) => execFileSync('redis-cli', ['-p', String(redis.port), ...args], { encoding: 'utf8' }).trim();
const [first, second] = await Promise.all([startUpstream(), startUpstream()]);
t.teardown(() => Promise.all([first.stop(), second.stop()]));
const portico = await startPortico({ PORTICO_REDIS_URL: redis.url });
t.teardown(() => portico.stop());

t.test('routes-reload-not-retried: a reload that failed at a reconnect is tried again until it works', async (t) => {
  const { accountId } = await accountWithKey(portico.ports.admin, 'pro');
  const made = await admin(portico.ports.admin, 'POST', '/admin/projects', { accountId, name: 'missed', upstream: first.url });
  t.equal(made.status, 201, `the project is made (${made.status} ${made.text.slice(0, 120)})`);
  const visit = () => request(portico.ports.https, 'missed.localhost', portico.ca, { path: '/echo', identity: 'localhost' });
  t.equal((await visit()).status, 200);
  const before = second.acceptedSockets;

  // a change this instance never hears of
  const key = `portico:project:${made.json.id}`;
  cli('SET', key, JSON.stringify({ ...JSON.parse(cli('GET', key)), upstream: second.url }));
  try {
    cli('ACL', 'SETUSER', 'default', '-@read');
    const logged = portico.logs.length;
    t.match(cli('CLIENT', 'KILL', 'TYPE', 'pubsub'), /^[1-9]/, "the subscriber's connection is cut");
    // it comes back at once, and its reload is refused
    for (let i = 0; i < 50 && !portico.logs.slice(logged).some((line) => line.includes('could not reload the routes')); i++) await sleep(50);
    t.ok(portico.logs.slice(logged).some((line) => line.includes('could not reload the routes')), 'the failed reload is logged');
  } finally {
    cli('ACL', 'SETUSER', 'default', '+@all');
  }
  let followed = false;
  for (let i = 0; i < 40 && !followed; i++) {
    await sleep(100);
    await visit();
    followed = second.acceptedSockets > before;
  }
  t.ok(followed, 'the project is forwarded to its new upstream once reads work again');
  t.ok(portico.logs.some((line) => line.includes('routes reloaded after the change notices')), 'and the reload that worked is logged');
});
