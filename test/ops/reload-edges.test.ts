// The edges of a configuration reload (DESIGN §5 POST /admin/reload): the shared TLS session ticket
// key survives it; a refused reload applies nothing of the new file and names the file at fault;
// every setting either applies (timeouts.upstreamMs, log.level) or makes the reload refused, naming
// it; PROXY protocol without a trusted proxy is refused at start.
import t from 'tap';
import tls from 'node:tls';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseDocument } from 'yaml';
import { spawnPortico, tempDir, cleanup, type Child } from '../helpers/portico.ts';
import { admin, api, request, accountWithKey } from '../helpers/client.ts';
import { startUpstream } from '../helpers/upstream.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const ORIGINAL = readFileSync(path.join(ROOT, 'config/portico.yaml'), 'utf8');
const dir = tempDir('reload-edges');
const configFile = path.join(dir, 'portico.yaml');

/** config/portico.yaml with ports 0 and `changes` */
function writeConfig(changes: Array<[path: string[], value: unknown]> = []): void {
  const doc = parseDocument(ORIGINAL);
  doc.setIn(['http', 'port'], 0);
  doc.setIn(['https', 'port'], 0);
  doc.setIn(['admin', 'port'], 0);
  for (const [at, value] of changes) doc.setIn(at, value);
  writeFileSync(configFile, String(doc));
}

writeConfig();
const upstream = await startUpstream();
// '' → unset: the file decides the ports and the log level, so a reload can change them
const portico: Child = await spawnPortico({ PORTICO_CONFIG: configFile, PORTICO_HTTP_PORT: '', PORTICO_HTTPS_PORT: '', PORTICO_ADMIN_PORT: '', PORTICO_LOG_LEVEL: '' });
const { ports, ca } = portico;
const certsDir = portico.env.PORTICO_CERTS_DIR;
t.teardown(async () => {
  await portico.kill('SIGKILL');
  await upstream.stop();
  cleanup(dir, portico.env.PORTICO_DATA_DIR, certsDir);
});

const reload = () => admin(ports.admin, 'POST', '/admin/reload');

/** a TLS 1.3 handshake for api.localhost, offering `session`; resolves once the ticket (if any) has come */
function handshake(session?: Buffer): Promise<{ reused: boolean; session: Buffer | undefined }> {
  return new Promise((resolve, reject) => {
    let ticket: Buffer | undefined;
    const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: 'api.localhost', ca, minVersion: 'TLSv1.3', ALPNProtocols: ['http/1.1'], session });
    socket.on('session', (s: Buffer) => (ticket = s));
    socket.once('error', reject);
    socket.once('secureConnect', () => {
      const reused = socket.isSessionReused();
      // TLS 1.3 tickets come after the handshake: a request and its answer let them arrive
      socket.write('GET /healthz HTTP/1.1\r\nHost: api.localhost\r\nConnection: close\r\n\r\n');
      socket.resume();
      socket.once('end', () => resolve({ reused, session: ticket }));
    });
  });
}

t.test('a TLS session from before a reload resumes after it (the shared ticket key stays)', async (t) => {
  // the shared key is applied moments after the start: a session resumed once is under it
  let first = await handshake();
  const deadline = Date.now() + 5_000;
  while (!(await handshake(first.session)).reused) {
    if (Date.now() > deadline) throw new Error('no session resumed even before any reload');
    first = await handshake();
  }
  t.equal((await reload()).status, 200);
  const after = await handshake(first.session);
  t.ok(after.reused, 'resumed after POST /admin/reload');
  t.equal((await reload()).status, 200);
  t.ok((await handshake(first.session)).reused, 'and after a second one');
});

const { key: freeKey } = await accountWithKey(ports.admin, 'free');
const freeLimit = async () => (await api(ports.https, ca, freeKey, { path: '/v1/categories' })).headers['x-ratelimit-limit'];

t.test('a reload refused for an unreadable fallback certificate applies nothing, and names the file', async (t) => {
  t.equal(await freeLimit(), '60');
  const certFile = path.join(certsDir, 'fallback.crt');
  const saved = readFileSync(certFile, 'utf8');
  t.teardown(() => writeFileSync(certFile, saved));
  writeFileSync(certFile, 'not a certificate\n');
  writeConfig([[['ratelimit', 'plans', 'free'], { perMinute: 7, perDay: 1000 }], [['trustedProxies'], ['10.9.8.7']]]);
  const refused = await reload();
  t.equal(refused.status, 400, refused.text);
  t.match(refused.json?.message, /The configuration was not reloaded/);
  t.match(refused.json?.message, certFile, 'names the certificate file');
  t.equal(await freeLimit(), '60', 'the Free plan keeps its previous limit');
  const served = await request(ports.https, 'api.localhost', ca, { path: '/healthz' });
  t.ok(served.status > 0, 'the previous fallback certificate still serves');

  writeFileSync(certFile, saved);
  t.equal((await reload()).status, 200, 'with the file back, the same configuration applies');
  t.equal(await freeLimit(), '7');
  writeConfig();
  t.equal((await reload()).status, 200);
});

t.test('timeouts.upstreamMs applies on reload', async (t) => {
  const { accountId } = await accountWithKey(ports.admin, 'pro');
  const project = await admin(ports.admin, 'POST', '/admin/projects', { accountId, name: 'slowapp', upstream: upstream.url });
  t.equal(project.status, 201, project.text);
  writeConfig([[['timeouts', 'upstreamMs'], 1000]]);
  t.equal((await reload()).status, 200);
  const started = Date.now();
  const answer = await request(ports.https, 'slowapp.localhost', ca, { path: '/slow?ms=3000', identity: 'localhost' });
  const tookMs = Date.now() - started;
  t.equal(answer.status, 504, 'the upstream answering after 3 s is past the new 1 s');
  t.ok(tookMs < 2_500, `answered after ${tookMs} ms`);
});

t.test('settings read once at start make the reload refused, naming each', async (t) => {
  const cases: Array<[string, Array<[string[], unknown]>]> = [
    ['acme.email', [[['acme', 'email'], 'ops@example.com']]],
    ['acme.onDemandWaitMs', [[['acme', 'onDemandWaitMs'], 1234]]],
    ['acme.limits', [[['acme', 'limits', 'newOrdersPer3h'], 7]]],
    ['ratelimit.onRedisDown', [[['ratelimit', 'onRedisDown'], 'closed']]],
    ['redis.replicaAckTimeoutMs', [[['redis', 'replicaAckTimeoutMs'], 999]]],
    ['redis.replicasToAck', [[['redis', 'replicasToAck'], 1]]],
  ];
  for (const [setting, changes] of cases) {
    writeConfig([[['timeouts', 'upstreamMs'], 1000], ...changes]);
    const refused = await reload();
    t.equal(refused.status, 400, `${setting}: refused`);
    t.match(refused.json?.message, setting, `names ${setting}`);
    t.match(refused.json?.message, /restart/, 'says it needs a restart');
  }
});

t.test('log.level applies on reload (warn: no access lines)', async (t) => {
  writeConfig([[['timeouts', 'upstreamMs'], 1000], [['log', 'level'], 'warn']]);
  t.equal((await reload()).status, 200);
  await new Promise((r) => setTimeout(r, 400));
  const before = portico.logs.length;
  t.equal((await api(ports.https, ca, freeKey, { path: '/v1/categories' })).status, 200);
  // lines reach stdout within 250 ms
  await new Promise((r) => setTimeout(r, 600));
  const lines = portico.logs.slice(before).filter((line) => line.includes('"level":30'));
  t.same(lines, [], 'no info line written after the reload');
});

t.test('PROXY protocol with no trusted proxy is refused at start, naming both variables', async (t) => {
  const refused = await spawnPortico({ PORTICO_PROXY_PROTOCOL: 'on', PORTICO_TRUSTED_PROXIES: '' }).then(
    async (started) => {
      await started.kill('SIGKILL');
      cleanup(started.env.PORTICO_DATA_DIR, started.env.PORTICO_CERTS_DIR);
      return 'it started';
    },
    (err: Error) => err.message,
  );
  t.match(refused, /exited with 2/, 'the start is refused');
  t.match(refused, /proxyProtocol \(PORTICO_PROXY_PROTOCOL\) is on but trustedProxies \(PORTICO_TRUSTED_PROXIES\) is empty/);
  const started = await spawnPortico({ PORTICO_PROXY_PROTOCOL: 'on', PORTICO_TRUSTED_PROXIES: '127.0.0.1' });
  t.teardown(async () => {
    await started.kill('SIGKILL');
    cleanup(started.env.PORTICO_DATA_DIR, started.env.PORTICO_CERTS_DIR);
  });
  t.ok(started.ports.https > 0, 'with a trusted proxy it starts');
});

t.test('trusted-proxies-reload-refusals: trustedProxies changed by a reload applies to requests refused before routing too', async (t) => {
  // the listener's recorder of refusals kept the trust it was made with at start
  writeConfig([[['trustedProxies'], ['127.0.0.1']]]);
  t.equal((await reload()).status, 200);
  t.teardown(async () => {
    writeConfig();
    await reload();
  });
  const answer = await new Promise<string>((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: 'api.localhost', ca, ALPNProtocols: ['http/1.1'] });
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.once('error', reject);
    socket.once('end', () => resolve(text));
    // `*` is for OPTIONS only: refused at the listener, before routing
    socket.write('GET * HTTP/1.1\r\nHost: api.localhost\r\nX-Forwarded-For: 203.0.113.9\r\nConnection: close\r\n\r\n');
  });
  t.match(answer, /^HTTP\/1\.1 400 /, 'refused before routing');
  let line: { clientIp?: string } | undefined;
  for (let i = 0; i < 50 && !line; i++) {
    line = portico.logs.map((l) => { try { return JSON.parse(l); } catch { return {}; } }).find((e) => e.path === '*' && e.status === 400);
    if (!line) await new Promise((resolve) => setTimeout(resolve, 20));
  }
  t.equal(line?.clientIp, '203.0.113.9', 'its access line takes the client from X-Forwarded-For of the proxy trusted since the reload');
});
