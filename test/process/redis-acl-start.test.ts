// Regression: starting with a Redis user short of rights (ACL) and with sentinels away, on real
// redis-servers and sentinels.
// - A data user with too few rights (`~* +get +set +hget +ping`) stopped the start with
//   `state backend unavailable: EXECABORT … NOPERM … 'exec'` (on a Cluster `Failed to refresh slots
//   cache.` after 6 s), naming neither the user nor the rule: the operator fixed one command per
//   restart (exec, then evalsha, then publish…). One lacking only EVALSHA and PUBLISH started, and
//   failed later. The start now stops at once with one line: the user, what Redis refused, the rule;
//   and that rule, given as the line says, makes the next start work.
// - One sentinel dead at the start: `listening to the sentinels' failover events` named it too.
// - Every sentinel down: the start stopped on ioredis's `All sentinels are unreachable. Retrying from
//   scratch after 650ms. Last error: Connection is closed.`: a retry it did not make, no sentinel named.
import t, { type Test } from 'tap';
import { spawnPortico, tempDir, cleanup, type Child } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';
import { startRedis } from '../helpers/redis.ts';
import { cli, startCluster, startSentinel } from '../helpers/redis-topology.ts';
import { freePort } from '../helpers/free-port.ts';

// what README gives the data user, as the tester quoted it
const README_RULE = '~portico:* ~{portico}:* &portico:* +@all -@dangerous +info';
const TOO_FEW = ['~*', '+get', '+set', '+hget', '+ping'];

interface Attempt {
  child: Child | null;
  /** every line it wrote, stdout and stderr */
  lines: string[];
  ms: number;
}

async function attempt(t: Test, url: string): Promise<Attempt> {
  const dataDir = tempDir('data');
  const certsDir = tempDir('certs');
  t.teardown(() => cleanup(dataDir, certsDir));
  const began = Date.now();
  try {
    const child = await spawnPortico({ PORTICO_REDIS_URL: url, PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir }, ['--workers', '1']);
    t.teardown(() => child.kill('SIGKILL'));
    return { child, lines: child.logs, ms: Date.now() - began };
  } catch (err) {
    return { child: null, lines: (err as Error).message.split('\n'), ms: Date.now() - began };
  }
}

const said = (lines: string[]) => lines.filter((line) => line.startsWith('portico: '));
const entries = (lines: string[]) =>
  lines.flatMap((line) => {
    try {
      return [JSON.parse(line) as { level: number; msg: string; sentinels?: string[]; sentinel?: string; errors?: Record<string, string> }];
    } catch {
      return [];
    }
  });

/** the rule the line tells to give, applied as it says: on every server */
async function applyRule(t: Test, line: string, ports: number[]): Promise<void> {
  const rule = /ACL SETUSER limited (.+)$/.exec(line)?.[1];
  t.ok(rule?.endsWith(README_RULE), `the line gives README's rule (${rule})`);
  if (!rule) return;
  for (const port of ports) t.equal(await cli(port, 'ACL', 'SETUSER', 'limited', ...rule.split(' ')), 'OK', `the user at :${port} takes it`);
}

/**
 * A start refused in one line naming the user, NOPERM and README's rule. `withinMs`: a wait it must not
 * sit out (a Cluster's slot map refused waited the whole 5 s wait for Redis), null where none applies;
 * a loaded machine is slow to spawn, not that slow.
 */
function checkRefused(t: Test, refused: Attempt, named: RegExp, withinMs: number | null): string {
  t.equal(refused.child, null, 'the start stops');
  if (refused.child) return '';
  t.match(refused.lines.join('\n'), /exited with 1 before listening/);
  const lines = said(refused.lines);
  t.equal(lines.length, 1, `one line says why (${lines.join(' | ')})`);
  const line = lines[0] ?? '';
  t.match(line, /the Redis user "limited"/, 'it names the user');
  t.match(line, named, 'it names what Redis refused');
  t.match(line, /ACL SETUSER limited [^;]+$/, 'it gives the rule');
  if (withinMs !== null) t.ok(refused.ms < withinMs, `without waiting out ${withinMs} ms (${refused.ms} ms)`);
  return line;
}

t.test('one Redis', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const url = redis.url.replace('redis://', 'redis://limited:pw@');
  await cli(redis.port, 'ACL', 'SETUSER', 'limited', 'on', '>pw', ...TOO_FEW);
  const line = checkRefused(t, await attempt(t, url), /NOPERM/, null);
  await applyRule(t, line, [redis.port]);
  await cli(redis.port, 'ACL', 'LOG', 'RESET');
  const started = await attempt(t, url);
  t.ok(started.child, `with the rule the start works (${said(started.lines).join(' | ')})`);
  if (started.child) t.equal((await admin(started.child.ports.admin, 'GET', '/readyz')).status, 200);
  t.equal(await cli(redis.port, 'ACL', 'LOG'), '', 'nothing refused on this start (ACL LOG)');
  await started.child?.kill('SIGKILL');

  // rights the start's own commands do not use: all of them in the one line
  await cli(redis.port, 'ACL', 'SETUSER', 'limited', 'reset', 'on', '>pw', '~portico:*', '&portico:*', '+@all', '-@dangerous', '+info', '-evalsha', '-publish');
  checkRefused(t, await attempt(t, url), /NOPERM for evalsha, publish\)/, null);
});

t.test('Cluster', async (t) => {
  const cluster = await startCluster();
  t.teardown(() => cluster.stop());
  const ports = cluster.nodes.map((node) => node.port);
  for (const port of ports) await cli(port, 'ACL', 'SETUSER', 'limited', 'on', '>pw', ...TOO_FEW);
  const url = cluster.url.replace('redis+cluster://', 'redis+cluster://limited:pw@');
  const line = checkRefused(t, await attempt(t, url), /NOPERM[^;]*cluster\|slots/, 5000);
  await applyRule(t, line, ports);
  const started = await attempt(t, url);
  t.ok(started.child, `with the rule the start works (${said(started.lines).join(' | ')})`);
});

t.test('Sentinel', async (t) => {
  const topology = await startSentinel();
  t.teardown(() => topology.stop());
  const ports = topology.nodes.map((node) => node.port);
  for (const port of ports) await cli(port, 'ACL', 'SETUSER', 'limited', 'on', '>pw', ...TOO_FEW);
  const url = topology.url.replace('redis+sentinel://', 'redis+sentinel://limited:pw@');
  const line = checkRefused(t, await attempt(t, url), /NOPERM/, null);
  await applyRule(t, line, ports);
  const started = await attempt(t, url);
  t.ok(started.child, `with the rule the start works (${said(started.lines).join(' | ')})`);
  await started.child?.kill('SIGKILL');

  t.test('one sentinel dead at the start: the start line names those listened to, a warning the other', async (t) => {
    const dead = topology.sentinels[1];
    const deadId = `127.0.0.1:${dead.port}`;
    await dead.kill();
    const running = await attempt(t, topology.url);
    t.ok(running.child, 'it starts');
    if (!running.child) return;
    const logged = () => entries(running.child!.logs);
    // its retries (every 2 s at most) say nothing more
    await new Promise((resolve) => setTimeout(resolve, 4500));
    const listening = logged().filter((e) => e.msg === 'listening to the sentinels\' failover events');
    t.equal(listening.length, 1, 'one start line');
    t.same([...(listening[0]?.sentinels ?? [])].sort(), topology.sentinels.filter((s) => s !== dead).map((s) => `127.0.0.1:${s.port}`).sort(), 'it names the sentinels listened to, not the dead one');
    const warned = logged().filter((e) => e.msg.startsWith('sentinels not reached'));
    t.equal(warned.length, 1, 'one warning');
    t.same(warned[0]?.sentinels, [deadId], 'naming the dead sentinel');
    t.match(warned[0]?.errors?.[deadId] ?? '', /ECONNREFUSED/, 'with its error');
    t.equal(warned[0]?.level, 40, 'as a warning');

    await dead.restart();
    const deadline = Date.now() + 10_000;
    while (!logged().some((e) => e.sentinel === deadId) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
    t.same(logged().filter((e) => e.sentinel === deadId).map((e) => e.msg), ['listening to a sentinel that could not be reached at the start'], 'back, it is told once');
  });
});

t.test('every sentinel down at the start: the line names them and says the start stops', async (t) => {
  const ports = [await freePort(), await freePort()];
  const refused = await attempt(t, `redis+sentinel://${ports.map((port) => `127.0.0.1:${port}`).join(',')}/portico`);
  t.equal(refused.child, null, 'the start stops');
  const lines = said(refused.lines);
  t.equal(lines.length, 1, `one line says why (${lines.join(' | ')})`);
  t.equal(lines[0], `portico: state backend unavailable: no sentinel could be reached: ${ports.map((port) => `127.0.0.1:${port} (connect ECONNREFUSED)`).join(', ')}; the start stops`);
  t.notMatch(refused.lines.join('\n'), /Retrying from scratch/, 'no retry promised');
});
