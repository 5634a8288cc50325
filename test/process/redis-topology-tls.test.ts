// rediss+sentinel:// and rediss+cluster:// with a password in the URL (DESIGN §8): a Portico on a TLS
// Sentinel topology and one on a TLS Cluster (every node TLS only, replication and the cluster bus
// too), each trusting the topology's self-signed certificate through NODE_EXTRA_CA_CERTS. State and
// the limiter's own connections work over TLS with the password, which appears in no log line and
// nowhere in /readyz or /metrics; on Sentinel, the sentinels require a password of their own (given as
// ?sentinel_password=), and the failover announcements are listened to over TLS, with it, on every
// sentinel. No failover here (redis-sentinel.test.ts, redis-cluster.test.ts, state/sentinel-switch.test.ts).
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import t from 'tap';
import { spawnPortico, cleanup, tempDir, type Child } from '../helpers/portico.ts';
import { api, admin, accountWithKey } from '../helpers/client.ts';
import { cli, startCluster, startSentinel, type SentinelTopology } from '../helpers/redis-topology.ts';

const run = promisify(execFile);
const PASSWORD = 'tls-topology-secret-42';
const SENTINEL_PASSWORD = 'sentinel+own/secret-17';

// hostnames: every node named `localhost` (Sentinel's announce-hostnames, the cluster's hostname
// endpoints), the URL too, and a certificate for that name only: every connection, the limiter's own
// included, must reach the servers by the names it was given, not by their addresses
for (const [mode, start] of [['sentinel', () => startSentinel({ tls: true, hostnames: true, password: PASSWORD, sentinelPassword: SENTINEL_PASSWORD })], ['cluster', () => startCluster({ tls: true, hostnames: true, password: PASSWORD })]] as const) {
  t.test(`rediss+${mode}:// with a password`, async (t) => {
    const topology = await start();
    t.teardown(() => topology.stop());
    t.match(topology.url, new RegExp(`^rediss\\+${mode}://default:`));
    if (mode === 'sentinel') {
      t.match(topology.url, /\?sentinel_password=/);
      // without the password a sentinel answers nothing but NOAUTH (redis-cli here without cli()'s -a)
      const { stdout } = await run('redis-cli', ['--tls', '--cacert', topology.caFile!, '-h', 'localhost', '-p', String((topology as SentinelTopology).sentinels[0].port), 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', (topology as SentinelTopology).name]);
      t.match(stdout, /NOAUTH/, 'the sentinels ask for a password');
      // and without ?sentinel_password= the start stops, saying what is missing (after its 5 s wait for Redis)
      const dataDir = tempDir('data');
      const certsDir = tempDir('certs');
      t.teardown(() => cleanup(dataDir, certsDir));
      const refused = await spawnPortico({ PORTICO_REDIS_URL: topology.url.replace(/\?.*$/, ''), NODE_EXTRA_CA_CERTS: topology.caFile!, PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir }, ['--workers', '1']).then(
        () => 'started',
        (err: Error) => err.message,
      );
      t.match(refused, /exited with 1 before listening/);
      t.match(refused, /NOAUTH[^\n]*the sentinels require a password: add \?sentinel_password=… to PORTICO_REDIS_URL/);
      t.notMatch(refused, PASSWORD, 'the servers\' password is not in the message');
    }
    const portico: Child = await spawnPortico({ PORTICO_REDIS_URL: topology.url, NODE_EXTRA_CA_CERTS: topology.caFile!, PORTICO_RATELIMIT_ON_REDIS_DOWN: 'closed' }, ['--workers', '1']);
    t.teardown(async () => {
      await portico.kill('SIGKILL');
      cleanup(portico.env.PORTICO_DATA_DIR, portico.env.PORTICO_CERTS_DIR);
    });

    const ready = await admin(portico.ports.admin, 'GET', '/readyz');
    t.equal(ready.status, 200);
    t.match(ready.json, { redis: 'ok', mode });

    // onRedisDown closed: every 200 was counted in Redis by the limiter over TLS
    const { key } = await accountWithKey(portico.ports.admin, 'enterprise', 'production', { perMinute: 100, perDay: 50 });
    t.equal((await api(portico.ports.https, portico.ca, key, { method: 'POST', path: '/v1/categories', json: { name: 'over tls' } })).status, 201);
    const first = await api(portico.ports.https, portico.ca, key, { path: '/v1/categories' });
    const second = await api(portico.ports.https, portico.ca, key, { path: '/v1/categories' });
    t.equal(first.status, 200);
    t.match(first.json, [{ name: 'over tls' }]);
    t.equal(Number(second.headers['x-ratelimit-remaining']), Number(first.headers['x-ratelimit-remaining']) - 1, 'counted in Redis');

    if (mode === 'sentinel') {
      // the sentinels' failover events are listened to over TLS too (sentinel-listeners.ts)
      for (const sentinel of (topology as SentinelTopology).sentinels) {
        let clients = '';
        for (const deadline = Date.now() + 5000; Date.now() < deadline; await new Promise((resolve) => setTimeout(resolve, 100))) {
          clients = await cli(sentinel.port, 'CLIENT', 'LIST');
          if (/name=portico-switch\b[^\n]*\bsub=3\b/.test(clients)) break;
        }
        t.match(clients, /name=portico-switch\b[^\n]*\bsub=3\b/, `subscribed to the failover events (3 channels) on the sentinel at :${sentinel.port}`);
      }
    }

    const metrics = await admin(portico.ports.admin, 'GET', '/metrics');
    for (const [what, text] of [['the log', portico.logs.join('\n')], ['/readyz', ready.text], ['/metrics', metrics.text]]) {
      t.notMatch(text, PASSWORD, `the password is not in ${what}`);
      t.notMatch(text, SENTINEL_PASSWORD, `the sentinels' password is not in ${what}`);
      t.notMatch(text, encodeURIComponent(SENTINEL_PASSWORD), `the sentinels' password, encoded, is not in ${what}`);
    }
    t.ok(portico.logs.some((line) => line.includes(`rediss+${mode}://***@`)), 'the log names the URL without its credentials');
    if (mode === 'sentinel') t.ok(portico.logs.some((line) => line.includes('?sentinel_password=***')), 'and without the sentinels\' password');
  });
}
