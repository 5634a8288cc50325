// Regression: a start refused by a Redis Cluster over TLS with a password never said why, on real
// redis-servers (six TLS-only nodes) and real Portico processes.
// - An untrusted certificate, a certificate that does not name the seeds' host, a wrong password: each
//   stopped after the 5 s wait with the same `state backend unavailable: Failed to refresh slots cache.`
//   (ioredis's ClusterAllFailedError), where one server names the reason. The line now names it, in one
//   server's words, with the seed nodes.
// - Seeds named as the certificate names them (localhost), on a Cluster whose slot map names its nodes
//   by address: the line said `the TLS handshake did not finish (rediss:// needs a port that speaks
//   TLS)`, a guess made because nothing listened to the nodes' errors. The seeds had answered; the nodes
//   the slot map names fail the hostname check. The line now says so, names those nodes and the fix,
//   and the fix it names makes the next start work.
import t, { type Test } from 'tap';
import { spawnPortico, tempDir, cleanup, type Child } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';
import { cli, startCluster } from '../helpers/redis-topology.ts';

const PASSWORD = 'n0de:P@ss/%x';
const WRONG = 'wr0ng:P@ss/%y';

// a certificate for DNS:localhost only (as a Kubernetes issuer makes them); the slot map names the
// nodes by address until a test says otherwise
const cluster = await startCluster({ tls: true, password: PASSWORD, hostnames: true });
t.teardown(() => cluster.stop());
const endpoints = (type: 'ip' | 'hostname') => Promise.all(cluster.nodes.map((node) => cli(node.port, 'CONFIG', 'SET', 'cluster-preferred-endpoint-type', type)));
await endpoints('ip');

interface Attempt {
  child: Child | null;
  /** every line it wrote, stdout and stderr */
  lines: string[];
}

async function attempt(url: string, caFile: string): Promise<Attempt> {
  const dataDir = tempDir('data');
  const certsDir = tempDir('certs');
  t.teardown(() => cleanup(dataDir, certsDir));
  try {
    const child = await spawnPortico({ PORTICO_REDIS_URL: url, NODE_EXTRA_CA_CERTS: caFile, PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir }, ['--workers', '1']);
    t.teardown(() => child.kill('SIGKILL'));
    return { child, lines: child.logs };
  } catch (err) {
    return { child: null, lines: (err as Error).message.split('\n') };
  }
}

const seeds = (host: string) => cluster.nodes.slice(0, 3).map((node) => `${host}:${node.port}`).sort().join(', ');
const byAddress = cluster.url.replaceAll('@localhost:', '@127.0.0.1:').replaceAll(',localhost:', ',127.0.0.1:');

// every refused start waits 5 s for Redis: all at once
const [untrusted, seedsByAddress, wrongPassword, slotMapByAddress] = await Promise.all([
  attempt(cluster.url, ''),
  attempt(byAddress, cluster.caFile!),
  attempt(cluster.url.replace(encodeURIComponent(PASSWORD), encodeURIComponent(WRONG)), cluster.caFile!),
  attempt(cluster.url, cluster.caFile!),
]);

/** the one line a refused start writes */
function refusal(t: Test, refused: Attempt): string {
  t.equal(refused.child, null, 'the start stops');
  const lines = refused.lines.filter((line) => line.startsWith('portico: state backend unavailable'));
  t.equal(lines.length, 1, `one line says why (${lines.join(' | ')})`);
  const all = refused.lines.join('\n');
  for (const secret of [PASSWORD, encodeURIComponent(PASSWORD), WRONG, encodeURIComponent(WRONG)]) t.notOk(all.includes(secret), 'no password anywhere in its output');
  t.notMatch(all, /Failed to refresh slots cache/, "not ioredis's words alone");
  return lines[0] ?? '';
}

t.test('the certificate not trusted: the line names the certificate and the seed nodes', async (t) => {
  const line = refusal(t, untrusted);
  t.match(line, /^portico: state backend unavailable: self-signed certificate\b/, 'in the words one server uses');
  t.ok(line.endsWith(` (seed nodes ${seeds('localhost')}); the start stops`), `it names the seed nodes (${line})`);
});

t.test('seeds by address, a certificate naming localhost only: the line names the mismatch and what the certificate names', async (t) => {
  t.match(byAddress, /^rediss\+cluster:\/\/default:[^@]+@127\.0\.0\.1:\d+,127\.0\.0\.1:\d+,127\.0\.0\.1:\d+$/, 'the seeds by address');
  const line = refusal(t, seedsByAddress);
  t.equal(line, `portico: state backend unavailable: Hostname/IP does not match certificate's altnames: IP: 127.0.0.1 is not in the cert's list: (seed nodes ${seeds('127.0.0.1')}; the certificate names DNS:localhost); the start stops`);
});

t.test('a wrong password: the line carries WRONGPASS, never the password', async (t) => {
  const line = refusal(t, wrongPassword);
  t.equal(line, `portico: state backend unavailable: WRONGPASS invalid username-password pair or user is disabled. (seed nodes ${seeds('localhost')}); the start stops`);
});

t.test('the seeds answer, the nodes the slot map names by address fail the hostname check: the line says so', async (t) => {
  const line = refusal(t, slotMapByAddress);
  t.notMatch(line, /TLS handshake did not finish/, 'no guess about the port');
  t.match(line, /^portico: state backend unavailable: Hostname\/IP does not match certificate's altnames: IP: 127\.0\.0\.1 is not in the cert's list: \(nodes? (127\.0\.0\.1:\d+(, )?)+; the certificate names DNS:localhost\): /, 'what failed, on which nodes');
  const named = [...line.matchAll(/127\.0\.0\.1:(\d+)/g)].map((m) => Number(m[1]));
  const ports = cluster.nodes.map((node) => node.port);
  t.ok(named.length > 0 && named.every((port) => ports.includes(port)), `the nodes named are the Cluster's (${named.join(', ')})`);
  t.match(line, /the seed nodes answered, and connections go to the names the Cluster's slot map gives/, 'where connections go');
  t.match(line, /cluster-announce-hostname with cluster-preferred-endpoint-type hostname\), or give them a certificate that also names 127\.0\.0\.1; the start stops$/, 'the fix');

  // the fix as the line gives it: the nodes announced by the name the certificate holds
  await endpoints('hostname');
  const started = await attempt(cluster.url, cluster.caFile!);
  t.ok(started.child, `then the start works (${started.lines.filter((l) => l.startsWith('portico:')).join(' | ')})`);
  if (started.child) t.equal((await admin(started.child.ports.admin, 'GET', '/readyz')).status, 200, '/readyz 200');
});
