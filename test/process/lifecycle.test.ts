// `portico serve` as a real process (DESIGN §1, §2, §8): graceful SIGTERM, refusing an invalid
// configuration, the first start's secrets, and one process per embedded data dir.
import t from 'tap';
import http from 'node:http';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { X509Certificate } from 'node:crypto';
import { spawnPortico, tempDir, cleanup, ADMIN_TOKEN, type Child } from '../helpers/portico.ts';
import { api, admin, accountWithKey } from '../helpers/client.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const CLI = path.join(ROOT, 'src/cli/main.ts');

const children: Child[] = [];
t.teardown(async () => {
  for (const child of children) await child.kill('SIGKILL');
  for (const child of children) cleanup(child.env.PORTICO_DATA_DIR, child.env.PORTICO_CERTS_DIR);
});
const start = async (env: Record<string, string> = {}) => {
  const child = await spawnPortico(env);
  children.push(child);
  return child;
};

interface Outcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** `portico serve` with exactly this environment (no helper defaults), for starts that must fail. */
function serveExpectingExit(env: Record<string, string>, timeoutMs = 15_000): Promise<Outcome> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('PORTICO_')));
  const child = spawn(process.execPath, [CLI, 'serve'], { env: { ...clean, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c) => (stdout += c));
  child.stderr.on('data', (c) => (stderr += c));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  return new Promise((resolve) => {
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

const jsonLines = (lines: string[]) =>
  lines.flatMap((line) => {
    try {
      return [JSON.parse(line) as Record<string, unknown>];
    } catch {
      return [];
    }
  });

t.test('SIGTERM finishes the request in flight, then exits 0', async (t) => {
  const hits: number[] = [];
  const upstream = http.createServer((req, res) => {
    hits.push(Date.now());
    if (req.url !== '/v1/pets/1') {
      res.writeHead(404).end();
      return;
    }
    setTimeout(() => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ id: 1, name: 'Rex', account: req.headers['x-portico-account-id'] }));
    }, 500);
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  t.teardown(() => upstream.close());

  const child = await start({ PORTICO_API_UPSTREAM: `http://127.0.0.1:${(upstream.address() as { port: number }).port}` });
  const { key, accountId } = await accountWithKey(child.ports.admin, 'pro');

  const sentAt = Date.now();
  let answeredAt = 0;
  const slow = api(child.ports.https, child.ca, key, { path: '/v1/pets/1' }).then((answer) => {
    answeredAt = Date.now();
    return answer;
  });
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.equal(hits.length, 1, 'the request reached the upstream before SIGTERM');
  const signalledAt = Date.now();
  child.process.kill('SIGTERM');

  // while it drains: the request is still open and new connections are refused
  const deadline = Date.now() + 300;
  const stopping = () => child.logs.some((line) => line.includes('"signal":"SIGTERM"'));
  while (!stopping() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  t.ok(stopping(), 'logs that it is stopping');
  t.equal(answeredAt, 0, 'the slow request is still in flight');
  const refused = await api(child.ports.https, child.ca, key, { path: '/v1/categories' }).then((a) => `answered ${a.status}`, (err: NodeJS.ErrnoException) => err.code);
  t.equal(refused, 'ECONNREFUSED', 'no new connections while draining');

  const answer = await slow;
  t.equal(answer.status, 200, 'the in-flight request completed');
  t.same(answer.json, { id: 1, name: 'Rex', account: accountId }, 'with the upstream\'s answer');
  t.ok(answeredAt - sentAt >= 500, 'it waited for the slow upstream');
  t.ok(answeredAt > signalledAt, 'the answer came after SIGTERM');
  const code = await child.exited;
  t.equal(code, 0, 'exit code 0');
  t.equal(child.process.signalCode, null, 'exited by itself, not killed by the signal');
  t.ok(child.logs.some((line) => line.includes('"msg":"stopped"')), 'logs that it stopped');
});

t.test('an invalid configuration exits 2 listing every problem', async (t) => {
  const dataDir = tempDir('lifecycle-bad-data');
  const certsDir = tempDir('lifecycle-bad-certs');
  t.teardown(() => cleanup(dataDir, certsDir));
  const outcome = await serveExpectingExit({
    PORTICO_CONFIG: path.join(ROOT, 'config/portico.yaml'),
    PORTICO_HTTP_PORT: 'abc',
    PORTICO_ADMIN_TOKEN: 'short',
    PORTICO_HTTPS_PORT: '0',
    PORTICO_ADMIN_PORT: '0',
    PORTICO_DATA_DIR: dataDir,
    PORTICO_CERTS_DIR: certsDir,
  });
  t.equal(outcome.code, 2, `exit code 2 (stderr: ${outcome.stderr})`);
  t.match(outcome.stderr, /PORTICO_HTTP_PORT/, 'names the bad port variable');
  t.match(outcome.stderr, /"abc"/, 'shows the bad value');
  t.match(outcome.stderr, /PORTICO_ADMIN_TOKEN/, 'names the short token');
  t.match(outcome.stderr, /16 characters/);
  t.notOk(outcome.stderr.includes('short"'), 'does not echo the token');
  t.notMatch(outcome.stdout, /Portico listening/, 'never listened');
  t.notOk(existsSync(path.join(certsDir, 'fallback.crt')), 'wrote nothing');
});

t.test('first start creates the fallback certificate and the admin token, and logs where', async (t) => {
  const dataDir = tempDir('lifecycle-first-data');
  const certsDir = tempDir('lifecycle-first-certs');
  t.teardown(() => cleanup(dataDir, certsDir));
  const certFile = path.join(certsDir, 'fallback.crt');
  const keyFile = path.join(certsDir, 'fallback.key');
  const tokenFile = path.join(dataDir, 'admin-token');
  t.notOk(existsSync(certFile) || existsSync(tokenFile), 'nothing there before');

  // '' overrides the helper's ADMIN_TOKEN, and an empty variable counts as unset
  const first = await start({ PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir, PORTICO_ADMIN_TOKEN: '' });
  t.ok(existsSync(certFile), 'fallback.crt created');
  t.ok(existsSync(keyFile), 'fallback.key created');
  t.ok(existsSync(tokenFile), 'admin-token created');
  t.equal(statSync(keyFile).mode & 0o077, 0, 'the key is private to its owner');
  t.equal(statSync(tokenFile).mode & 0o077, 0, 'the token is private to its owner');
  const cert = new X509Certificate(readFileSync(certFile));
  t.match(cert.subjectAltName, 'DNS:localhost');
  t.match(cert.subjectAltName, 'DNS:*.localhost');

  const entries = jsonLines(first.logs);
  t.ok(entries.some((e) => e.certFile === certFile && e.keyFile === keyFile), 'logs the certificate paths');
  t.ok(entries.some((e) => e.tokenFile === tokenFile), 'logs the token path');
  const token = readFileSync(tokenFile, 'utf8').trim();
  t.ok(token.length >= 16, 'a token of at least 16 characters');
  t.notOk(first.logs.some((line) => line.includes(token)), 'the token itself is never logged');

  t.equal((await admin(first.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' }, token)).status, 201, 'the saved token is the admin token');
  t.equal((await admin(first.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' }, ADMIN_TOKEN)).status, 401, 'the helper\'s default token is not');
  const healthy = await api(first.ports.https, first.ca, null, { path: '/v1/openapi.json' });
  t.equal(healthy.status, 200, 'clients trusting fallback.crt reach the HTTPS listener');

  t.equal(await first.kill('SIGTERM'), 0);
  const certBefore = readFileSync(certFile, 'utf8');
  const second = await start({ PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir, PORTICO_ADMIN_TOKEN: '' });
  t.equal(readFileSync(tokenFile, 'utf8').trim(), token, 'a restart keeps the token');
  t.equal(readFileSync(certFile, 'utf8'), certBefore, 'and the certificate');
  t.equal((await admin(second.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' }, token)).status, 201);
  t.equal(await second.kill('SIGTERM'), 0);

  // a saved token too short to be one is replaced, and the log says so
  writeFileSync(tokenFile, 'short\n');
  const third = await start({ PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir, PORTICO_ADMIN_TOKEN: '' });
  const replaced = readFileSync(tokenFile, 'utf8').trim();
  t.ok(replaced.length >= 16 && replaced !== token, 'a new token');
  t.ok(jsonLines(third.logs).some((e) => e.level === 40 && e.tokenFile === tokenFile && /shorter than 16 characters: replaced/.test(String(e.msg))), 'a warning names the file');
  t.notOk(third.logs.some((line) => line.includes('short') && !line.includes('shorter')), 'the old value is not logged');
  t.equal(await third.kill('SIGTERM'), 0);
});

t.test('a second process on the same embedded data dir exits non-zero: the dir is in use', async (t) => {
  const first = await start();
  const { key } = await accountWithKey(first.ports.admin, 'pro');
  const dataDir = first.env.PORTICO_DATA_DIR;
  const certsDir = tempDir('lifecycle-second-certs');
  t.teardown(() => cleanup(certsDir));

  const outcome = await serveExpectingExit({
    PORTICO_CONFIG: path.join(ROOT, 'config/portico.yaml'),
    PORTICO_HTTP_PORT: '0',
    PORTICO_HTTPS_PORT: '0',
    PORTICO_ADMIN_PORT: '0',
    PORTICO_ADMIN_TOKEN: ADMIN_TOKEN,
    PORTICO_DATA_DIR: dataDir,
    PORTICO_CERTS_DIR: certsDir,
  });
  t.equal(outcome.signal, null, 'it exited by itself');
  t.ok(outcome.code !== null && outcome.code !== 0, `exit code non-zero (${outcome.code})`);
  t.match(outcome.stderr, /in use/, `says the data dir is in use: ${outcome.stderr.trim()}`);
  t.match(outcome.stderr, dataDir, 'names the data dir');
  t.match(outcome.stderr, String(first.process.pid), 'names the process that owns it');
  t.notMatch(outcome.stdout, /Portico listening/, 'never listened');

  // the owner is untouched: it still writes and serves
  const created = await api(first.ports.https, first.ca, key, { method: 'POST', path: '/v1/categories', json: { name: 'still mine' } });
  t.equal(created.status, 201);
  t.equal(await first.kill('SIGTERM'), 0);

  // once the owner is gone the data dir can be opened again, with what it held
  const next = await start({ PORTICO_DATA_DIR: dataDir });
  const listed = await api(next.ports.https, next.ca, key, { path: '/v1/categories' });
  t.equal(listed.status, 200);
  t.match(listed.json, [{ id: created.json.id, name: 'still mine' }]);
});
