// `portico` CLI: bad usage is exit 2 before anything is sent, a stuck or redirecting admin URL is
// exit 1 without hanging or leaking the token, and output that cannot be written is a failure.
// Real CLI processes against a real Portico, or a loopback server where the subject is the peer.
import t from 'tap';
import http from 'node:http';
import net from 'node:net';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { startPortico, tempDir, cleanup, ADMIN_TOKEN } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';
import { cliRunner } from '../helpers/cli.ts';

const portico = await startPortico();
t.teardown(async () => {
  await portico.stop();
  cleanup(portico.dataDir, portico.certsDir);
});
const cli = cliRunner({ PORTICO_ADMIN_URL: `http://127.0.0.1:${portico.ports.admin}`, PORTICO_ADMIN_TOKEN: ADMIN_TOKEN });
t.teardown(() => cli.close());

const call = async (method: string, path: string, body?: unknown) => {
  const answer = await admin(portico.ports.admin, method, path, body);
  if (answer.status >= 300) throw new Error(`${method} ${path}: ${answer.status} ${answer.text}`);
  return answer.json;
};

/** A pro account's project with a deploy and one domain. */
async function projectWithDomain(name: string, hostname: string): Promise<string> {
  const account = await call('POST', '/admin/accounts', { plan: 'pro' });
  const project = await call('POST', '/admin/projects', { accountId: account.id, name, upstream: 'http://127.0.0.1:9' });
  await call('POST', `/admin/projects/${project.id}/domains`, { hostname });
  return project.id;
}

/** A loopback HTTP server that records every request. */
async function recorder(answer: (req: http.IncomingMessage, res: http.ServerResponse) => void) {
  const seen: Array<{ method: string; url: string; authorization?: string }> = [];
  const server = http.createServer((req, res) => {
    seen.push({ method: req.method!, url: req.url!, authorization: req.headers.authorization });
    answer(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { seen, url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, close: () => new Promise((resolve) => server.close(resolve)) };
}

t.test('redirects add --status abc / 302abc / 3.07e2 is bad usage (exit 2), not a 301 or 307', async (t) => {
  const project = await projectWithDomain('clistatus', 'www.status.example');
  for (const status of ['abc', '302abc', '3.07e2', '303', '', ' 301']) {
    const run = await cli(['redirects', 'add', project, '--from', 'www.status.example', '--to', 'shop.status.example', `--status=${status}`]);
    t.equal(run.code, 2, `--status "${status}": exit 2`);
    t.match(run.stderr, '--status must be one of 301, 302, 307, 308', 'names the flag and the accepted values');
    t.equal(run.stdout, '');
  }
  t.same((await call('GET', `/admin/projects/${project}`)).redirects, [], 'nothing reached the server');
  const ok = await cli(['redirects', 'add', project, '--from', 'www.status.example', '--to', 'shop.status.example', '--status', '307', '--json']);
  t.equal(ok.code, 0, ok.stderr);
  t.same(JSON.parse(ok.stdout), { from: 'www.status.example', to: 'shop.status.example', status: 307 });
});

t.test('issue: "served at" and a redirect\'s target named no port when visitors do not use 443', async (t) => {
  const account = await call('POST', '/admin/accounts', { plan: 'pro' });
  const create = (name: string, env: Record<string, string | undefined>) => cli(['projects', 'create', '--account', account.id, '--name', name, '--upstream', 'http://127.0.0.1:9'], env);
  const onOther = await create('cliport', { PORTICO_PUBLIC_HTTPS_PORT: '8443' });
  t.equal(onOther.code, 0, onOther.stderr);
  t.match(onOther.stdout, /\nserved at https:\/\/cliport\.localhost:8443\n$/, 'the public HTTPS port, as redirects name it');
  for (const [name, env] of [['cliport443', { PORTICO_PUBLIC_HTTPS_PORT: '443' }], ['clinoport', {}]] as const) {
    const run = await create(name, env);
    t.equal(run.code, 0, run.stderr);
    t.match(run.stdout, new RegExp(`\\nserved at https://${name}\\.localhost\\n$`), `${name}: 443 is the scheme's default and is left out`);
  }
  const bad = await create('clibadport', { PORTICO_PUBLIC_HTTPS_PORT: '84430' });
  t.equal(bad.code, 2, bad.stderr);
  t.match(bad.stderr, 'PORTICO_PUBLIC_HTTPS_PORT must be a whole number from 1 to 65535 (got "84430")');
  t.notOk((await call('GET', '/admin/projects')).some((p: { name: string }) => p.name === 'clibadport'), 'nothing was created');
  const project = await projectWithDomain('cliportredirect', 'www.port.example');
  const redirect = await cli(['redirects', 'add', project, '--from', 'www.port.example', '--to', 'shop.port.example'], { PORTICO_PUBLIC_HTTPS_PORT: '8443' });
  t.equal(redirect.code, 0, redirect.stderr);
  t.equal(redirect.stdout, 'www.port.example → https://shop.port.example:8443 (301)\n');
});

t.test('--per-minute and --per-day take digits only (exit 2 naming the flag)', async (t) => {
  const cases = [
    [['accounts', 'create', '--plan', 'enterprise', '--per-minute', '1e3', '--per-day', '5000'], '--per-minute'],
    [['accounts', 'create', '--plan', 'enterprise', '--per-minute', '10', '--per-day', '0x1000'], '--per-day'],
    [['accounts', 'create', '--plan', 'enterprise', '--per-minute', '0', '--per-day', '10'], '--per-minute'],
    [['accounts', 'set', 'acc_x', '--per-minute', '10', '--per-day', '12.5'], '--per-day'],
  ] as const;
  const runs = await Promise.all(cases.map(([args]) => cli([...args])));
  runs.forEach((run, i) => {
    t.equal(run.code, 2, cases[i][0].join(' '));
    t.match(run.stderr, `${cases[i][1]} must be a whole number of at least 1`);
  });
  const half = await cli(['accounts', 'create', '--plan', 'enterprise', '--per-minute', '10']);
  t.equal(half.code, 2, 'one limit without the other is bad usage');
  t.match(half.stderr, '--per-minute and --per-day go together');
});

t.test('serve --workers abc, 0, -1, 1.5, 257 exit 2 with a message naming --workers', async (t) => {
  const runs = await Promise.all(['abc', '0', '-1', '1.5', '257'].map((n) => cli(['serve', `--workers=${n}`])));
  for (const run of runs) {
    t.equal(run.code, 2, run.stderr);
    t.match(run.stderr, '--workers must be a whole number from 1 to 256');
  }
});

t.test('missing required options exit 2 naming the option, before any token is needed', async (t) => {
  const noToken = tempDir('cli-no-token');
  t.teardown(() => cleanup(noToken));
  const env = { PORTICO_ADMIN_TOKEN: undefined, PORTICO_DATA_DIR: noToken };
  const cases = [
    [['accounts', 'create'], '--plan is required'],
    [['accounts', 'create', '--json'], '--plan is required'],
    [['keys', 'create'], '--account is required'],
    [['projects', 'create', '--account', 'acc_x'], '--name is required'],
    [['projects', 'create', '--name', 'shop'], '--account is required'],
    [['redirects', 'add', 'prj_x', '--from', 'www.example.com'], '--to is required'],
  ] as const;
  for (const environment of [{}, env]) {
    const runs = await Promise.all(cases.map(([args]) => cli([...args], environment)));
    runs.forEach((run, i) => {
      t.equal(run.code, 2, `${cases[i][0].join(' ')}${environment === env ? ' (no token)' : ''}: ${run.stderr}`);
      t.match(run.stderr, cases[i][1]);
      t.notMatch(run.stderr, /no admin token|400/);
    });
  }
});

t.test('an admin URL that accepts and never answers: exit 1 after PORTICO_CLI_TIMEOUT_MS, saying so', async (t) => {
  const sockets = new Set<net.Socket>();
  const silent = net.createServer((socket) => sockets.add(socket));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const socket of sockets) socket.destroy();
    silent.close();
  });
  const url = `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
  const run = await cli(['keys', 'revoke', 'key_x'], { PORTICO_ADMIN_URL: url, PORTICO_CLI_TIMEOUT_MS: '1000' });
  t.equal(run.code, 1, run.stderr);
  t.match(run.stderr, `the admin API at ${url} did not answer within 1 s`);
  t.ok(run.ms < 8_000, `gave up after about a second (${run.ms} ms)`);
  t.ok(sockets.size >= 1, 'it did connect');

  const bad = await cli(['keys', 'revoke', 'key_x'], { PORTICO_ADMIN_URL: url, PORTICO_CLI_TIMEOUT_MS: '1s' });
  t.equal(bad.code, 2, 'a malformed timeout is bad usage');
  t.match(bad.stderr, 'PORTICO_CLI_TIMEOUT_MS must be a whole number');
});

t.test('a redirect from the admin URL is not followed: the token stays, exit 1 naming the target', async (t) => {
  // Portico's own plain-HTTP listener answers 308 to https://127.0.0.1/…
  const plain = await cli(['keys', 'revoke', 'key_x'], { PORTICO_ADMIN_URL: `http://127.0.0.1:${portico.ports.http}` });
  t.equal(plain.code, 1, plain.stderr);
  t.match(plain.stderr, /answered 308, a redirect to https:\/\/127\.0\.0\.1/);

  const target = await recorder((_req, res) => res.writeHead(204).end());
  const redirector = await recorder((_req, res) => res.writeHead(307, { location: `${target.url}/admin/keys/key_x` }).end());
  t.teardown(() => Promise.all([target.close(), redirector.close()]));
  const run = await cli(['keys', 'revoke', 'key_x'], { PORTICO_ADMIN_URL: redirector.url });
  t.equal(run.code, 1, run.stderr);
  t.match(run.stderr, `answered 307, a redirect to ${target.url}/admin/keys/key_x`);
  t.equal(redirector.seen.length, 1);
  t.same(target.seen, [], 'nothing, and no token, went to the redirect target');
});

t.test('domains remove --json prints {"removed": hostname}', async (t) => {
  const project = await projectWithDomain('cliremove', 'www.remove.example');
  const run = await cli(['domains', 'remove', project, 'www.remove.example', '--json']);
  t.equal(run.code, 0, run.stderr);
  t.same(JSON.parse(run.stdout), { removed: 'www.remove.example' });
  t.equal((await admin(portico.ports.admin, 'GET', `/admin/projects/${project}/domains/www.remove.example`)).status, 404, 'it is gone');
});

t.test('GROUP --help prints the group\'s usage and exits 0', async (t) => {
  const groups = { accounts: ['create', 'set'], keys: ['create', 'revoke'], projects: ['create'], domains: ['add', 'verify', 'reverify', 'remove', 'list', 'events', 'import'], redirects: ['add'] };
  const runs = await Promise.all(Object.keys(groups).map((group) => cli([group, '--help'])));
  Object.entries(groups).forEach(([group, commands], i) => {
    t.equal(runs[i].code, 0, `${group} --help: ${runs[i].stderr}`);
    t.match(runs[i].stdout, new RegExp(`^Usage: portico ${group} <command>`, 'm'));
    for (const command of commands) t.match(runs[i].stdout, `portico ${group} ${command}`);
    t.notMatch(runs[i].stdout, group === 'keys' ? 'accounts create' : 'keys create', 'only the group');
  });
  const [helpAccounts, bare, unknown] = await Promise.all([cli(['help', 'accounts']), cli(['accounts']), cli(['accounts', 'frob'])]);
  t.equal(helpAccounts.code, 0);
  t.match(helpAccounts.stdout, 'Usage: portico accounts <command>');
  t.equal(bare.code, 2, 'a group without a command is bad usage');
  t.match(bare.stderr, '"accounts" needs a command');
  t.match(bare.stderr, 'portico accounts create');
  t.equal(unknown.code, 2);
  t.match(unknown.stderr, 'unknown command "accounts frob"');
});

t.test('portico --version (also -v, version): the release and the runtime, exit 0', async (t) => {
  const { version } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };
  for (const args of [['--version'], ['-v'], ['version']]) {
    const run = await cli(args);
    t.equal(run.code, 0, args[0]);
    t.equal(run.stdout.trim(), `portico ${version} (Node ${process.version})`, args[0]);
  }
  t.equal((await cli(['--version', 'extra'])).code, 2, 'with anything after it: bad usage');
});

t.test('portico with no arguments is bad usage: the help on stderr, exit 2', async (t) => {
  const run = await cli([]);
  t.equal(run.code, 2);
  t.match(run.stderr, /^Usage: portico <command>/m);
  t.equal(run.stdout, '');
});

t.test('output that cannot be written (/dev/full) exits 1 with a message on stderr', async (t) => {
  const full = openSync('/dev/full', 'w');
  t.teardown(() => closeSync(full));
  const [help, created] = await Promise.all([
    cli(['--help'], {}, { stdout: full }),
    cli(['accounts', 'create', '--plan', 'pro'], {}, { stdout: full }),
  ]);
  for (const run of [help, created]) {
    t.equal(run.code, 1, run.stderr);
    t.match(run.stderr, 'cannot write the output (ENOSPC)');
  }
});

t.test('hostnames in path segments are percent-encoded (IDN, and characters that would change the path)', async (t) => {
  const server = await recorder((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"hostname":"x","status":"pending","diagnostics":[]}'));
  t.teardown(() => server.close());
  const env = { PORTICO_ADMIN_URL: server.url };
  t.equal((await cli(['domains', 'verify', 'prj_x', 'bücher.example.de'], env)).code, 0);
  t.equal((await cli(['domains', 'reverify', 'prj/x', 'a/b?c#d.example'], env)).code, 0);
  t.same(server.seen.map((r) => `${r.method} ${r.url}`), [
    'POST /admin/projects/prj_x/domains/b%C3%BCcher.example.de/verify',
    'POST /admin/projects/prj%2Fx/domains/a%2Fb%3Fc%23d.example/reverify',
  ]);
});

t.test('a Unicode hostname given to domains verify and remove names the domain added in punycode', async (t) => {
  const project = await projectWithDomain('cliidn', 'bücher.example.de');
  const verify = await cli(['domains', 'verify', project, 'bücher.example.de', '--json']);
  t.equal(verify.code, 0, verify.stderr);
  t.equal(JSON.parse(verify.stdout).hostname, 'xn--bcher-kva.example.de');
  const remove = await cli(['domains', 'remove', project, 'bücher.example.de']);
  t.equal(remove.code, 0, remove.stderr);
  t.equal((await admin(portico.ports.admin, 'GET', `/admin/projects/${project}/domains/xn--bcher-kva.example.de`)).status, 404);
});

t.test('an option given twice is bad usage, not its last value', async (t) => {
  const project = await projectWithDomain('clitwice', 'www.twice.example');
  const run = await cli(['redirects', 'add', project, '--from', 'www.twice.example', '--to', 'shop.twice.example', '--status', '301', '--status=302']);
  t.equal(run.code, 2, run.stderr);
  t.match(run.stderr, '--status is given more than once');
  t.same((await call('GET', `/admin/projects/${project}`)).redirects, [], 'nothing reached the server');
});

t.test('accounts set with nothing to change is bad usage and sends nothing', async (t) => {
  const account = await call('POST', '/admin/accounts', { plan: 'pro' });
  const seen = await recorder((_req, res) => res.end('{}'));
  t.teardown(() => seen.close());
  const run = await cli(['accounts', 'set', account.id], { PORTICO_ADMIN_URL: seen.url });
  t.equal(run.code, 2, run.stderr);
  t.match(run.stderr, 'nothing to change: give --plan, or --per-minute and --per-day');
  t.same(seen.seen, [], 'no request was made');
  const changed = await cli(['accounts', 'set', account.id, '--plan', 'business', '--json']);
  t.equal(changed.code, 0, changed.stderr);
  t.equal(JSON.parse(changed.stdout).plan, 'business');
});
