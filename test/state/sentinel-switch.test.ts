// Following the failovers the sentinels announce (sentinel-switch.ts): the announcement's text, and on
// a real Sentinel topology (a primary, two replicas, three sentinels) a switchover under the
// connections of redis-connect.ts. Each sentinel announces +switch-master when it learns of the
// failover, some a second or more after the others: a connection already on the new primary must
// stay there through the later announcements (ioredis's own detector reconnected at each of them),
// also when the sentinels announce nodes by hostname, and when the failover's leader is a sentinel that
// was down when the connections were made.
import t from 'tap';
import type { Redis } from 'ioredis';
import { connectRedis } from '../../src/state/redis.ts';
import { SENTINEL_ACL } from '../../src/state/redis-connect.ts';
import { addressesOf, announcedPrimary, otherSentinels, selectedFrom } from '../../src/state/sentinel-events.ts';
import { RedisLimiter } from '../../src/ratelimit/redis-limiter.ts';
import { cli, startSentinel } from '../helpers/redis-topology.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const peerPort = (client: Redis) => (client as unknown as { stream?: { remotePort?: number } }).stream?.remotePort;
async function until(what: string, check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}
/** the ports of the sentinels flagged s_down in SENTINEL SENTINELS as redis-cli prints it (one field a line) */
function downSentinels(reply: string): number[] {
  const lines = reply.split('\n');
  const out: number[] = [];
  for (let at = 0; at < lines.length; at++) {
    if (lines[at] !== 'port') continue;
    const flags = lines.indexOf('flags', at);
    if (flags >= 0 && lines[flags + 1].split(',').includes('s_down')) out.push(Number(lines[at + 1]));
  }
  return out;
}

t.test('an announcement names the new primary of one name, or nothing', async (t) => {
  t.same(announcedPrimary('portico 127.0.0.1 6379 127.0.0.1 6380', 'portico'), { host: '127.0.0.1', port: 6380 });
  t.same(announcedPrimary('portico ::1 6379 ::1 6380', 'portico'), { host: '::1', port: 6380 });
  t.equal(announcedPrimary('other 127.0.0.1 6379 127.0.0.1 6380', 'portico'), null, 'another primary');
  t.equal(announcedPrimary('portico 127.0.0.1 6379 127.0.0.1', 'portico'), null, 'a field short');
  t.equal(announcedPrimary('portico 127.0.0.1 6379 127.0.0.1 6380 x', 'portico'), null, 'a field more');
  for (const port of ['0', '65536', '63a', '-1', '', '0x50', '1e3', '80.0']) t.equal(announcedPrimary(`portico 127.0.0.1 6379 127.0.0.1 ${port}`, 'portico'), null, `port "${port}"`);
});

t.test('a failover\'s selected replica names the primary it replaces, for one name', async (t) => {
  t.same(selectedFrom('slave 127.0.0.1:6380 127.0.0.1 6380 @ portico 127.0.0.1 6379', 'portico'), { host: '127.0.0.1', port: 6379 });
  t.same(selectedFrom('slave redis-1:6380 redis-1 6380 @ portico redis-0 6379', 'portico'), { host: 'redis-0', port: 6379 }, 'by hostname');
  t.equal(selectedFrom('slave 127.0.0.1:6380 127.0.0.1 6380 @ other 127.0.0.1 6379', 'portico'), null, 'another primary');
  t.equal(selectedFrom('master portico 127.0.0.1 6379', 'portico'), null, 'not a replica\'s event');
  t.equal(selectedFrom('slave 127.0.0.1:6380 127.0.0.1 6380 # portico 127.0.0.1 6379', 'portico'), null, 'no @');
  for (const port of ['0', '65536', 'x']) t.equal(selectedFrom(`slave 127.0.0.1:6380 127.0.0.1 6380 @ portico 127.0.0.1 ${port}`, 'portico'), null, `port "${port}"`);
});

t.test('the other sentinels, from SENTINEL SENTINELS', async (t) => {
  const reply = [
    ['name', 'a1', 'ip', '127.0.0.1', 'port', '26380', 'runid', 'a1', 'flags', 'sentinel'],
    ['name', 'b2', 'ip', 'sentinel-2.redis', 'port', '26381', 'flags', 'sentinel'],
    ['name', 'c3', 'ip', '127.0.0.1', 'port', '26382', 'flags', 's_down,sentinel,disconnected'],
    ['name', 'e5', 'ip', '127.0.0.1', 'port', '26383', 'flags', 'sentinel,disconnected'],
    ['name', 'port', 'ip', '127.0.0.1', 'port', '70000', 'flags', 'sentinel'],
    ['name', 'd4', 'ip', '127.0.0.1', 'flags', 'sentinel'],
    'not a list',
  ];
  t.same(otherSentinels(reply), [{ host: '127.0.0.1', port: 26380 }, { host: 'sentinel-2.redis', port: 26381 }, { host: '127.0.0.1', port: 26383 }], 'the ones not down, with an address and a port (a sentinel whose links are being made again too)');
  t.same(otherSentinels(null), []);
  t.same(otherSentinels('ERR'), []);
});

t.test('an announced host is compared by its addresses', async (t) => {
  t.same(await addressesOf('127.0.0.1'), ['127.0.0.1']);
  t.same(await addressesOf('::1'), ['::1']);
  t.ok((await addressesOf('localhost')).includes('127.0.0.1'), 'a hostname: what it resolves to');
  t.same(await addressesOf('no-such-host.invalid'), [], 'one that does not resolve: none (the connection is moved, as before)');
});

const variants = [
  { hostnames: false, label: '' },
  { hostnames: true, label: ', nodes announced by hostname' },
  // a URL naming one sentinel (or one name in front of all of them) while another leads the failover:
  // only the leader tells that a replica is being promoted
  { hostnames: false, oneSentinel: true, label: ', the URL naming one sentinel, another leading' },
  // the least a sentinel ACL user needs (README), and nothing refused meanwhile (ACL LOG)
  { hostnames: false, sentinelUser: { name: 'portico', password: 'sentinel+secret', rules: SENTINEL_ACL }, label: ', sentinels with an ACL user of the README\'s rules' },
  // a sentinel down at the start (the others flag it s_down, so it is not named) and back once the
  // connections are up, then leading the failover: it was never listened to, asked once at the start
  { hostnames: false, lateSentinel: true, label: ', led by a sentinel that was down at the start' },
];
for (const { hostnames, oneSentinel, sentinelUser, lateSentinel, label } of variants) t.test(`a switchover${label}: both connections move to the new primary and stay there through every announcement`, async (t) => {
  // with announce-hostnames the sentinels name every node `localhost`, and the connections' peers are
  // addresses: an announcement must be compared with what its name resolves to
  const topology = await startSentinel({ hostnames, sentinelUser });
  t.teardown(() => topology.stop());
  const late = lateSentinel ? topology.sentinels[2] : undefined;
  if (late) {
    await late.kill();
    await until(`sentinel ${late.port} found down by the others`, async () => downSentinels(await cli(topology.sentinels[0].port, 'SENTINEL', 'SENTINELS', topology.name)).includes(late.port));
  }
  const url = oneSentinel || late ? `redis+sentinel://127.0.0.1:${topology.sentinels[oneSentinel ? 1 : 0].port}/${topology.name}` : topology.url;
  const events: Array<{ message: string; fields: Record<string, unknown> }> = [];
  const conns = connectRedis(url, { commandTimeoutMs: 1000, onTopologyEvent: (_level, message, fields) => events.push({ message, fields }) });
  t.teardown(() => {
    conns.subscriber.disconnect();
    conns.client.disconnect();
  });
  const { client, subscriber } = conns;
  await Promise.all([client, subscriber].map((c) => (c.status === 'ready' ? undefined : new Promise((resolve) => c.once('ready', resolve)))));
  // as a Portico start does (openRedisStores): every sentinel is listened to before anything is
  // written; with one sentinel in the URL, the leader of the failover below is found by asking it
  await conns.sentinelsHeard;
  if (late) {
    // back, and named by the others again: asked again, they name it, and it is listened to too
    await late.restart();
    const deadline = Date.now() + 20_000;
    while (!/name=portico-switch .*sub=3/.test(await cli(late.port, 'CLIENT', 'LIST')) && Date.now() < deadline) await sleep(200);
  }
  for (const sentinel of topology.sentinels) {
    const clients = await cli(sentinel.port, 'CLIENT', 'LIST');
    t.match(clients, /name=portico-switch .*sub=3/, `sentinel ${sentinel.port}: its failover events are listened to`);
  }
  if (late) t.same(events.filter((e) => e.fields.sentinel === `127.0.0.1:${late.port}`).map((e) => e.message), ['listening to a sentinel newly named by the others'], 'the sentinel back is told once');
  const messages: string[] = [];
  subscriber.on('message', (_channel: string, message: string) => messages.push(message));
  await subscriber.subscribe('portico:switch-test');
  const before = await topology.primary();
  t.equal(peerPort(client), before.port, 'the client starts on the primary');
  // the limiter's own connection takes its node from the client (limiter-nodes.ts)
  const limiter = new RedisLimiter(conns);
  t.teardown(() => limiter.close());
  // X-RateLimit-* reports the day here (fewest remaining), so a minute boundary meanwhile changes nothing
  const limit = { perMinute: 100_000, perDay: 1000 };
  const ban = { refusals: 1000, windowSeconds: 60, banSeconds: 60 };
  const first = await limiter.consume('switch-test', limit, ban);
  t.equal(first.remaining, limit.perDay - 1, 'the limiter counts on the primary');

  // writes go on through the switchover; each is acknowledged as Portico does (WAIT for a replica)
  const acknowledged: string[] = [];
  let refused = 0;
  const reasons = new Set<string>();
  let writing = true;
  const writer = (async () => {
    for (let i = 0; writing; i++) {
      try {
        // as the stores' writes do (redis-commands.ts): a failover begun meanwhile refuses the acknowledgement
        const mark = conns.writeMark();
        await client.rpush('portico:switch-writes', String(i));
        await conns.acknowledge(mark);
        acknowledged.push(String(i));
      } catch {
        refused++;
        reasons.add(conns.health.connectionError?.message ?? '');
        await sleep(20);
      }
    }
  })();

  // the sentinel asked leads the failover: the only one to announce +selected-slave
  t.equal(await cli((late ?? topology.sentinels[0]).port, 'SENTINEL', 'FAILOVER', topology.name), 'OK', 'a switchover begins');
  const deadline = Date.now() + 15_000;
  const moved = () => [client, subscriber].every((c) => c.status === 'ready' && peerPort(c) !== before.port);
  while (!moved() && Date.now() < deadline) await sleep(20);
  t.ok(moved(), 'both connections left the old primary');
  const after = await topology.primary();
  t.not(after.port, before.port, 'the sentinels promoted a replica');
  t.equal(peerPort(client), after.port, 'the client is on the new primary');
  t.equal(peerPort(subscriber), after.port, 'so is the subscriber');

  // from here on, through the announcements of the sentinels that learn of it later
  let closes = 0;
  for (const c of [client, subscriber]) c.on('close', () => closes++);
  await topology.settled();
  await sleep(1500);
  t.equal(closes, 0, 'no connection was dropped once on the new primary');
  writing = false;
  await writer;
  // the old primary is up and still a primary until the sentinels make it a replica (seconds later):
  // what a connection wrote there after the replica's promotion began would be dropped then
  const kept = new Set(await client.lrange('portico:switch-writes', 0, -1));
  t.comment(`${acknowledged.length} writes acknowledged, ${refused} refused during the switchover`);
  t.same(acknowledged.filter((i) => !kept.has(i)), [], 'every acknowledged write is on the new primary');
  // what a refused write reports: the failover, not ioredis's "All sentinels are unreachable"
  t.same([...reasons].filter((reason) => reason.startsWith('All sentinels')), [], `refusals said what they were: ${[...reasons].join(' | ')}`);
  t.equal(await client.set('portico:switch-test', 'written'), 'OK', 'a write goes to the new primary');
  t.equal(await client.publish('portico:switch-test', 'after'), 1, 'the subscriber is subscribed again');
  while (messages.length === 0 && Date.now() < deadline) await sleep(20);
  t.same(messages, ['after']);
  if (sentinelUser) {
    for (const sentinel of topology.sentinels) {
      t.equal(await cli(sentinel.port, 'ACL', 'LOG'), '', `nothing refused by the sentinel at :${sentinel.port}`);
      t.match(await cli(sentinel.port, 'CLIENT', 'LIST'), /name=portico-switch\b[^\n]*\bsub=3\b[^\n]*\buser=portico\b/, 'its failover events are heard as that user');
    }
  }
  // the switchover moved the counters with the data (the replica had them): counting goes on from there
  const next = await limiter.consume('switch-test', limit, ban);
  t.equal(next.remaining, limit.perDay - 2, 'the limiter counts on the new primary, from where it was');
});
