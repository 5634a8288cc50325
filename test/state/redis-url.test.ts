// PORTICO_REDIS_URL's forms (DESIGN §8): each topology, its defaults, and refusals that name the
// accepted forms without ever showing the password.
import t from 'tap';
import { parseRedisUrl, redact } from '../../src/state/redis-url.ts';
import { parseConfig } from '../../src/config.ts';

t.test('the accepted forms', async (t) => {
  t.same(parseRedisUrl('redis://10.0.0.5:6380/2'), { mode: 'standalone', tls: false, addresses: [{ host: '10.0.0.5', port: 6380 }], name: undefined, db: 2, username: undefined, password: undefined });
  t.match(parseRedisUrl('rediss://:s3cret@cache.internal'), { mode: 'standalone', tls: true, addresses: [{ host: 'cache.internal', port: 6379 }], db: 0, password: 's3cret' });
  t.match(parseRedisUrl('redis+sentinel://app:p%40ss@127.0.0.1:26379,127.0.0.1:26380,[::1]:26381/portico/3'), {
    mode: 'sentinel', tls: false, name: 'portico', db: 3, username: 'app', password: 'p@ss',
    addresses: [{ host: '127.0.0.1', port: 26379 }, { host: '127.0.0.1', port: 26380 }, { host: '::1', port: 26381 }],
  });
  t.match(parseRedisUrl('rediss+sentinel://s1,s2/main'), { mode: 'sentinel', tls: true, name: 'main', addresses: [{ host: 's1', port: 26379 }, { host: 's2', port: 26379 }] });
  t.match(parseRedisUrl('redis+cluster://127.0.0.1:7000,127.0.0.1:7001'), { mode: 'cluster', tls: false, db: 0, addresses: [{ host: '127.0.0.1', port: 7000 }, { host: '127.0.0.1', port: 7001 }] });
  t.match(parseRedisUrl('rediss+cluster://u:pw@n1:7000'), { mode: 'cluster', tls: true, username: 'u', password: 'pw' });
});

t.test('sentinels with a password of their own: ?sentinel_password= (and sentinel_username)', async (t) => {
  t.match(parseRedisUrl('redis+sentinel://app:pw@s1:26379,s2:26380/portico?sentinel_password=s%2Bp%40ss%2F1'), {
    mode: 'sentinel', name: 'portico', username: 'app', password: 'pw', sentinelUsername: undefined, sentinelPassword: 's+p@ss/1',
  });
  t.match(parseRedisUrl('rediss+sentinel://s1/main/2?sentinel_username=watch&sentinel_password=a+b'), { tls: true, db: 2, sentinelUsername: 'watch', sentinelPassword: 'a+b' }, 'a + stays a +');
  const plain = parseRedisUrl('redis+sentinel://s1/main');
  t.equal((plain as { sentinelPassword?: string }).sentinelPassword, undefined, 'none: the sentinels are reached without credentials');
  t.equal((parseRedisUrl('redis+sentinel://s1/main?sentinel_password=') as { sentinelPassword?: string }).sentinelPassword, undefined, 'empty is none');
  for (const [url, why] of [
    ['redis://h:6379?sentinel_password=topsecret', /takes no query/],
    ['redis+cluster://h:7000?sentinel_password=topsecret', /takes no query/],
    ['redis+sentinel://s1/main?password=topsecret', /query parameter other than sentinel_username and sentinel_password/],
    ['redis+sentinel://s1/main?topsecret', /query parameter other than/],
    ['redis+sentinel://s1/main?sentinel_password=topsecret&sentinel_password=topsecret', /sentinel_password twice/],
    ['redis+sentinel://s1/main?sentinel_password=top%secret', /not valid percent-encoding/],
  ] as const) {
    const parsed = parseRedisUrl(url);
    t.ok(parsed instanceof Error, `${redact(url)} is refused`);
    t.match((parsed as Error).message, why);
    t.notMatch((parsed as Error).message, /topsecret|top%secret/, 'without the password');
  }
});

t.test('wrong URLs are refused with the accepted forms, never the password', async (t) => {
  for (const url of [
    'http://u:topsecret@10.0.0.5:6379',
    'redis://u:topsecret@a:1,b:2',
    'redis+sentinel://u:topsecret@a:26379',
    'redis+sentinel://u:topsecret@a:26379/name/notanumber',
    'redis+cluster://u:topsecret@a:7000/1',
    'redis+cluster://u:topsecret@a:99999',
    'redis+sentinel://u:topsecret@/portico',
  ]) {
    const parsed = parseRedisUrl(url);
    t.ok(parsed instanceof Error, `${redact(url)} is refused`);
    t.notMatch((parsed as Error).message, /topsecret/, 'without the password');
    t.match((parsed as Error).message, /redis\+sentinel:\/\/\[user:password@\]host:port\[,host:port…\]\/<primary name>\[\/db\]/, 'naming the accepted forms');
  }
});

t.test('a wrong URL stops the configuration with one problem', async (t) => {
  try {
    parseConfig('{}', 'test.yaml', { PORTICO_REDIS_URL: 'redis+sentinal://u:topsecret@a:1/x' }, process.cwd());
    t.fail('accepted');
  } catch (err) {
    const message = String((err as Error).message);
    t.match(message, /redis\.url \(PORTICO_REDIS_URL\) must be one of/);
    t.notMatch(message, /topsecret/);
  }
});

t.test('redact hides user and password', async (t) => {
  t.equal(redact('redis+sentinel://app:pw@h:1,h:2/p'), 'redis+sentinel://***@h:1,h:2/p');
  t.equal(redact('redis://h:6379'), 'redis://h:6379');
  t.equal(redact('redis+sentinel://app:pw@h:1/p?sentinel_username=w&sentinel_password=s%2B1'), 'redis+sentinel://***@h:1/p?sentinel_username=***&sentinel_password=***');
  t.equal(redact('redis+sentinel://h:1?sentinel_password=a@b'), 'redis+sentinel://***', 'an @ in the query: what follows it may be the password\'s tail');
  t.equal(redact('rediss+sentinel://u:p%40s@h:1,h:2/portico?sentinel_password=sen@tinelTAIL'), 'rediss+sentinel://***', 'the same behind a user and password');
  t.equal(redact('redis+sentinel://h:1/m?sentinel_password=Top#SECRETTAIL'), 'redis+sentinel://h:1/m?sentinel_password=***#***', 'a # in a query value: the fragment it starts is hidden');
  t.equal(redact('redis://u:p@h:1/0#frag'), 'redis://***@h:1/0#***');
  t.equal(redact('redis://u:pa?ss@h:1'), 'redis://***', 'a ? in the password: hidden whole');
  t.equal(redact('redis+sentinel://h:1/p?topsecret&sentinel_password=x'), 'redis+sentinel://h:1/p?***&sentinel_password=***', 'a parameter without = is hidden whole');
  t.equal(redact('redis://app:pw'), 'redis://app:***', 'user:password without its @: a port that is no number is hidden');
  t.equal(redact('redis+cluster://a:7000,[::1]:pw/'), 'redis+cluster://a:7000,[::1]:***/');
  t.equal(redact('redis://[::1]:6379/2'), 'redis://[::1]:6379/2');
  const forgotten = parseRedisUrl('redis://app:pw');
  t.ok(forgotten instanceof Error && /a port is a number, and a user and password end with an @/.test(forgotten.message), 'the message says what an @ is for');
  // an unencoded @ in the password: the URL shown (hidden up to its last @) looks right, so the message says why
  const unencoded = parseRedisUrl('redis://user:p@ss@127.0.0.1:6379');
  t.ok(unencoded instanceof Error && /an @ in the user or password is written %40/.test(unencoded.message), `the message says how to write an @ (${String(unencoded)})`);
  t.notMatch(String(unencoded), /p@ss|ss@/, 'nor shows the password');
});
