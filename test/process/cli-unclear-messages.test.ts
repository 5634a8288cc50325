// Regression tests for a tester's findings: CLI messages that did not say what was wrong — a
// PORTICO_ADMIN_URL without a scheme ("Invalid URL; is Portico running?"), https:// to the plain-HTTP
// admin listener (a raw OpenSSL line), a path silently dropped, another server on the admin URL
// ("404 : "), a refused token (not saying where it came from), an upstream without a scheme.
// Real CLI processes against a real Portico, or a loopback server where the subject is the peer.
import t from 'tap';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { writeFileSync } from 'node:fs';
import { startPortico, tempDir, cleanup, ADMIN_TOKEN } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';
import { cliRunner } from '../helpers/cli.ts';

const portico = await startPortico();
t.teardown(async () => {
  await portico.stop();
  cleanup(portico.dataDir, portico.certsDir);
});
const adminUrl = `http://127.0.0.1:${portico.ports.admin}`;
const cli = cliRunner({ PORTICO_ADMIN_URL: adminUrl, PORTICO_ADMIN_TOKEN: ADMIN_TOKEN });
t.teardown(() => cli.close());

/** A loopback HTTP server that records every request and answers with `answer`. */
async function server(answer: (res: http.ServerResponse) => void) {
  const seen: string[] = [];
  const listener = http.createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    answer(res);
  });
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  return { seen, url: `http://127.0.0.1:${(listener.address() as net.AddressInfo).port}`, close: () => new Promise((resolve) => listener.close(resolve)) };
}

t.test('issue: PORTICO_ADMIN_URL without a scheme read "cannot reach … (Invalid URL); is Portico running?" (exit 1)', async (t) => {
  const values = [`127.0.0.1:${portico.ports.admin}`, `localhost:${portico.ports.admin}`];
  const runs = await Promise.all(values.map((value) => cli(['accounts', 'create', '--plan', 'pro'], { PORTICO_ADMIN_URL: value })));
  runs.forEach((run, i) => {
    t.equal(run.code, 2, `${values[i]}: bad usage, exit 2 (${run.stderr.trim()})`);
    t.match(run.stderr, `PORTICO_ADMIN_URL must be an http:// URL such as http://127.0.0.1:9180 (got "${values[i]}")`);
    t.match(run.stderr, `did you mean http://${values[i]}?`);
    t.notMatch(run.stderr, /Invalid URL|is Portico running/);
    t.equal(run.stdout, '');
  });
});

t.test('issue: https:// to the admin listener printed a raw OpenSSL line broken in two', async (t) => {
  const run = await cli(['accounts', 'create', '--plan', 'pro'], { PORTICO_ADMIN_URL: `https://127.0.0.1:${portico.ports.admin}` });
  t.equal(run.code, 1, run.stderr);
  t.equal(run.stderr.trimEnd().split('\n').length, 1, `one line: ${JSON.stringify(run.stderr)}`);
  t.match(run.stderr, `the admin API at https://127.0.0.1:${portico.ports.admin} does not answer TLS: Portico's admin API speaks plain HTTP (PORTICO_ADMIN_URL=${adminUrl})`);
  t.notMatch(run.stderr, /routines|openssl|wrong version number/);
});

t.test('issue: a path in PORTICO_ADMIN_URL was dropped without a word; now it is refused before anything is sent', async (t) => {
  const peer = await server((res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  t.teardown(() => peer.close());
  for (const suffix of ['/prefix/', '/admin']) {
    const run = await cli(['keys', 'revoke', 'key_x'], { PORTICO_ADMIN_URL: `${peer.url}${suffix}` });
    t.equal(run.code, 2, `${suffix}: exit 2 (${run.stderr.trim()})`);
    t.match(run.stderr, `PORTICO_ADMIN_URL must not have a path (got "${peer.url}${suffix}"): the admin API answers at /admin/… of its listener, such as ${peer.url}`);
  }
  const slash = await cli(['keys', 'revoke', 'key_x'], { PORTICO_ADMIN_URL: `${peer.url}/` });
  t.equal(slash.code, 0, `a trailing slash alone is no path: ${slash.stderr}`);
  t.same(peer.seen, ['DELETE /admin/keys/key_x'], 'only the run without a path reached the server');
});

t.test('issue: another server on the admin URL read "404 : "; now it says the URL is not Portico\'s admin API', async (t) => {
  const empty = await server((res) => res.writeHead(404).end());
  const page = await server((res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>\n<h1>Welcome</h1>\n</html>'));
  const json = await server((res) => res.writeHead(403, { 'content-type': 'application/json' }).end('{"error":"forbidden"}'));
  t.teardown(() => Promise.all([empty.close(), page.close(), json.close()]));
  const [notFound, html, other] = await Promise.all([empty, page, json].map((peer) => cli(['accounts', 'create', '--plan', 'pro'], { PORTICO_ADMIN_URL: peer.url })));
  t.equal(notFound.code, 1, notFound.stderr);
  t.match(notFound.stderr, `${empty.url}/admin/accounts does not answer as Portico's admin API (404 Not Found, no body); is PORTICO_ADMIN_URL the admin listener (PORTICO_ADMIN_PORT)?`);
  t.equal(html.code, 1, html.stderr);
  t.match(html.stderr, `${page.url}/admin/accounts does not answer as Portico's admin API (200 OK: <html> <h1>Welcome</h1> </html>)`);
  t.equal(html.stderr.trimEnd().split('\n').length, 1, 'one line');
  t.equal(other.code, 1, other.stderr);
  t.match(other.stderr, `${json.url}/admin/accounts does not answer as Portico's admin API (403 Forbidden: {"error":"forbidden"})`);

  const direct = await cli(['keys', 'revoke', 'key_doesnotexist']);
  t.equal(direct.code, 1);
  t.match(direct.stderr, /^portico keys revoke: 404 not_found: /, 'Portico\'s own 404 still reads as the server\'s answer');
});

t.test('issue: a refused admin token did not say where it came from', async (t) => {
  const wrong = 'wrong-token-0123456789abcdef';
  const fromEnv = await cli(['accounts', 'create', '--plan', 'pro'], { PORTICO_ADMIN_TOKEN: wrong });
  t.equal(fromEnv.code, 1, fromEnv.stderr);
  t.match(fromEnv.stderr, `the admin API at ${adminUrl} refused the admin token (401 unauthorized) read from PORTICO_ADMIN_TOKEN; it is not the token this Portico uses`);
  t.notOk(fromEnv.stderr.includes(wrong), 'the token is not shown');

  const dir = tempDir('cli-stale-token');
  t.teardown(() => cleanup(dir));
  const stale = 'stale-token-0123456789abcdef';
  writeFileSync(path.join(dir, 'admin-token'), `${stale}\n`, { mode: 0o600 });
  const fromFile = await cli(['accounts', 'create', '--plan', 'pro'], { PORTICO_ADMIN_TOKEN: undefined, PORTICO_DATA_DIR: dir });
  t.equal(fromFile.code, 1, fromFile.stderr);
  t.match(fromFile.stderr, `refused the admin token (401 unauthorized) read from ${path.join(dir, 'admin-token')}; a stale file is the usual cause`);
  t.match(fromFile.stderr, 'set PORTICO_ADMIN_TOKEN, or PORTICO_DATA_DIR to this Portico\'s data dir');
  t.notOk(fromFile.stderr.includes(stale), 'the token is not shown');
});

t.test('issue: an upstream without a scheme read "must be an http:// or https:// URL" with no hint', async (t) => {
  const account = await admin(portico.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' });
  const upstreams = ['localhost:3000', '127.0.0.1:3000'];
  const runs = await Promise.all(upstreams.map((upstream, i) => cli(['projects', 'create', '--account', account.json.id, '--name', `hint${i}`, '--upstream', upstream])));
  runs.forEach((run, i) => {
    t.equal(run.code, 1, run.stderr);
    t.match(run.stderr, `"${upstreams[i]}"`, 'names the value');
    t.match(run.stderr, `Did you mean "http://${upstreams[i]}"?`);
  });
  t.match(runs[0].stderr, '"upstream" must be an http:// or https:// URL, got "localhost:3000".');
  const ftp = await cli(['projects', 'create', '--account', account.json.id, '--name', 'hintftp', '--upstream', 'ftp://files.example']);
  t.equal(ftp.code, 1);
  t.match(ftp.stderr, '"upstream" must be an http:// or https:// URL, got "ftp://files.example".');
  t.notMatch(ftp.stderr, 'Did you mean', 'no hint where a scheme was given');
});
