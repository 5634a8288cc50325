// Configuration reload (DESIGN §5 POST /admin/reload): SIGHUP and POST /admin/reload put a
// changed config/portico.yaml in force; a bad one (or one changing a restart-only setting) is refused
// with the reasons and the old one stays; reloads under load drop no request and no WebSocket.
import t from 'tap';
import https from 'node:https';
import tls from 'node:tls';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseDocument } from 'yaml';
import { WebSocket, type ClientOptions } from 'ws';
import { spawnPortico, tempDir, cleanup, type Child } from '../helpers/portico.ts';
import { admin, api, request, accountWithKey } from '../helpers/client.ts';
import { freePort } from '../helpers/free-port.ts';
import { startUpstream } from '../helpers/upstream.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const ORIGINAL = readFileSync(path.join(ROOT, 'config/portico.yaml'), 'utf8');
const dir = tempDir('reload');
const configFile = path.join(dir, 'portico.yaml');

/** config/portico.yaml with ports 0 (the file decides them here, not the environment) and `changes` */
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
// PORTICO_*_PORT '' → unset: the ports come from the file, so a change of https.port there is seen
const portico: Child = await spawnPortico({ PORTICO_CONFIG: configFile, PORTICO_HTTP_PORT: '', PORTICO_HTTPS_PORT: '', PORTICO_ADMIN_PORT: '' });
const { ports, ca } = portico;
t.teardown(async () => {
  await portico.kill('SIGKILL');
  await upstream.stop();
  cleanup(dir, portico.env.PORTICO_DATA_DIR, portico.env.PORTICO_CERTS_DIR);
});

const entries = () =>
  portico.logs.flatMap((line) => {
    try {
      return [JSON.parse(line) as { msg?: string; problems?: string[]; [k: string]: unknown }];
    } catch {
      return [];
    }
  });
const count = (msg: string) => entries().filter((e) => typeof e.msg === 'string' && e.msg.startsWith(msg)).length;

/** sends SIGHUP and waits for the log line that says how it ended */
async function sighup(expect: 'configuration reloaded' | 'reload refused') {
  const other = expect === 'configuration reloaded' ? 'reload refused' : 'configuration reloaded';
  const [before, beforeOther] = [count(expect), count(other)];
  portico.process.kill('SIGHUP');
  const deadline = Date.now() + 10_000;
  while (count(expect) === before) {
    if (count(other) !== beforeOther) throw new Error(`SIGHUP: expected "${expect}", got "${other}":\n${portico.logs.slice(-5).join('\n')}`);
    if (Date.now() > deadline) throw new Error(`SIGHUP: no "${expect}" log line within 10 s:\n${portico.logs.slice(-10).join('\n')}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return entries().filter((e) => typeof e.msg === 'string' && e.msg.startsWith(expect)).at(-1)!;
}

const big = { perMinute: 10_000_000, perDay: 100_000_000 };
const { key, accountId } = await accountWithKey(ports.admin, 'enterprise', 'production', big);
const newCategory = (name: string) => api(ports.https, ca, key, { method: 'POST', path: '/v1/categories', json: { name } });
const viaApi2 = () => api(ports.https, ca, key, { hostname: 'api2.localhost', path: '/v1/categories', identity: 'localhost' });

t.test('SIGHUP puts a changed setting in force (api.maxCategories 10000 → 1)', async (t) => {
  t.equal((await newCategory('first')).status, 201);
  t.equal((await newCategory('second')).status, 201, 'under the default cap a second category is fine');
  writeConfig([[['api', 'maxCategories'], 1]]);
  await sighup('configuration reloaded');
  const third = await newCategory('third');
  t.equal(third.status, 409, 'past the new cap');
  t.equal(third.json?.code, 'conflict');
  t.equal((await api(ports.https, ca, key, { path: '/v1/categories' })).json.length, 2, 'reads unaffected');
});

t.test('POST /admin/reload does the same and answers 200 {"status":"reloaded"}', async (t) => {
  t.equal((await viaApi2()).status, 404, 'api2.localhost is no API host yet');
  writeConfig([[['api', 'maxCategories'], 1], [['api', 'hosts'], ['api.localhost', 'localhost', '127.0.0.1', 'api2.localhost']]]);
  const logged = count('configuration reloaded');
  const reloaded = await admin(ports.admin, 'POST', '/admin/reload');
  t.equal(reloaded.status, 200);
  t.same(reloaded.json, { status: 'reloaded' });
  // logged too; lines reach stdout within 250 ms, so wait for this one before the next SIGHUP counts lines
  const deadline = Date.now() + 5_000;
  while (count('configuration reloaded') === logged && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  t.equal(count('configuration reloaded'), logged + 1, 'the reload is logged as a SIGHUP one is');
  const answer = await viaApi2();
  t.equal(answer.status, 200, 'api2.localhost serves /v1 at once');
  t.equal(answer.json.length, 2);
  t.equal((await newCategory('still capped')).status, 409, 'the rest of the file still in force');
  t.equal((await admin(ports.admin, 'POST', '/admin/reload', undefined, null)).status, 401, 'the admin token is needed');
});

t.test('a bad config is refused with the reasons; the old one stays in force', async (t) => {
  // every change here would be visible: the cap back to 10000, api2 gone, plus two mistakes
  writeConfig([[['http', 'port'], 'x'], [['bogus'], true], [['api', 'maxCategories'], 10000]]);
  const refused = await admin(ports.admin, 'POST', '/admin/reload');
  t.equal(refused.status, 400);
  t.equal(refused.json?.code, 'invalid_request');
  t.equal(refused.json?.status, 400);
  t.match(refused.json?.message, /http\.port/, 'names http.port');
  t.match(refused.json?.message, /bogus/, 'names the unknown key');

  const logged = await sighup('reload refused');
  t.ok(Array.isArray(logged.problems), 'the log line lists the problems');
  t.ok(logged.problems!.some((p) => p.includes('http.port')), 'http.port among them');
  t.ok(logged.problems!.some((p) => p.includes('bogus')), 'the unknown key among them');
  t.equal(portico.process.exitCode, null, 'still running');

  t.equal((await newCategory('after refusal')).status, 409, 'cap 1 still in force');
  t.equal((await viaApi2()).status, 200, 'api2.localhost still an API host');
});

t.test('a restart-only change (https.port, https.keyExchange) is refused, naming it', async (t) => {
  const other = await freePort();
  writeConfig([[['api', 'maxCategories'], 10000], [['https', 'port'], other]]);
  const refused = await admin(ports.admin, 'POST', '/admin/reload');
  t.equal(refused.status, 400);
  t.equal(refused.json?.code, 'invalid_request');
  t.match(refused.json?.message, /https\.port/, 'names https.port');
  t.match(refused.json?.message, /restart/, 'says it needs a restart');
  const logged = await sighup('reload refused');
  t.ok(logged.problems?.some((p) => p.includes('https.port')), 'SIGHUP refusal names https.port');
  t.equal((await newCategory('after restart-only')).status, 409, 'nothing of that file applied (cap still 1)');
  t.equal((await api(ports.https, ca, key, { path: '/v1/categories' })).status, 200, 'still serving on the old port');
  writeConfig([[['api', 'maxCategories'], 10000], [['https', 'keyExchange'], ['X25519']]]);
  const groups = await admin(ports.admin, 'POST', '/admin/reload');
  t.equal(groups.status, 400, 'a new key exchange list needs a restart too');
  t.match(groups.json?.message, /https\.keyExchange/, 'names https.keyExchange');
});

t.test('reloads under load: no failed request, an open WebSocket stays open', async (t) => {
  writeConfig([[['api', 'maxCategories'], 1], [['api', 'hosts'], ['api.localhost', 'localhost', '127.0.0.1', 'api2.localhost']]]);
  await sighup('configuration reloaded');
  const project = await admin(ports.admin, 'POST', '/admin/projects', { accountId, name: 'reloadapp', upstream: upstream.url });
  t.equal(project.status, 201, project.text);
  const hostname = 'reloadapp.localhost';

  // a WebSocket through the project, open across every reload
  // ws hands these to tls.connect; its typings know neither `servername` nor Node's checkServerIdentity
  const wsOptions = {
    ca,
    servername: hostname,
    headers: { host: hostname },
    checkServerIdentity: (_name: string, cert: tls.PeerCertificate) => tls.checkServerIdentity('localhost', cert),
  } as unknown as ClientOptions;
  const ws = new WebSocket(`wss://127.0.0.1:${ports.https}/ws`, wsOptions);
  const received: string[] = [];
  let closed = false;
  ws.on('message', (data) => received.push(data.toString()));
  ws.on('close', () => (closed = true));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  const echo = async (text: string) => {
    const seen = received.length;
    ws.send(text);
    const deadline = Date.now() + 5_000;
    while (received.length === seen && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    return received[seen];
  };
  t.equal(await echo('before'), 'before');

  // 8 client loops on keep-alive connections for ~3 s: 4 on /v1, 4 through the project
  const failures: string[] = [];
  const statuses = new Map<number, number>();
  let stop = false;
  const agents: https.Agent[] = [];
  const loop = async (i: number) => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    agents.push(agent);
    let n = 0;
    while (!stop) {
      n++;
      try {
        const answer = i % 2 === 0
          ? await api(ports.https, ca, key, { path: '/v1/categories', agent })
          : await request(ports.https, hostname, ca, { path: `/echo?loop=${i}&n=${n}`, agent, identity: 'localhost' });
        statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
        if (answer.status !== 200) failures.push(`loop ${i} #${n}: ${answer.status} ${answer.text.slice(0, 200)}`);
      } catch (err) {
        failures.push(`loop ${i} #${n}: ${(err as Error).message}`);
      }
    }
  };
  const loops = Array.from({ length: 8 }, (_, i) => loop(i));
  const reloadsBefore = count('configuration reloaded');
  for (let i = 0; i < 5; i++) {
    await new Promise((r) => setTimeout(r, 450));
    writeConfig([[['api', 'maxCategories'], 1], [['api', 'hosts'], ['api.localhost', 'localhost', '127.0.0.1', 'api2.localhost']], [['api', 'maxBodyBytes'], 65536 + i]]);
    await sighup('configuration reloaded');
  }
  await new Promise((r) => setTimeout(r, 500));
  stop = true;
  await Promise.all(loops);
  for (const agent of agents) agent.destroy();

  const total = [...statuses.values()].reduce((a, b) => a + b, 0);
  t.equal(count('configuration reloaded') - reloadsBefore, 5, 'five reloads happened during the load');
  t.same(failures.slice(0, 20), [], `no failed request (${failures.length} of ${total + failures.length})`);
  t.same([...statuses.keys()], [200], 'every answer 200');
  t.ok(total > 200, `${total} requests served during the reloads`);
  t.notOk(closed, 'the WebSocket was not closed');
  t.equal(ws.readyState, WebSocket.OPEN);
  t.equal(await echo('after'), 'after', 'and it still echoes');
  t.equal(upstream.wsRequests.length, 1, 'on its first and only upstream connection');
  ws.close();
});
