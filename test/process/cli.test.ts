// `portico` CLI (DESIGN §1) as a real child process against a real admin listener: what it prints,
// its exit codes (0 ok, 1 the call failed, 2 usage), and where it finds the admin token.
import t from 'tap';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { startPortico, tempDir, cleanup, ADMIN_TOKEN } from '../helpers/portico.ts';
import { api, admin } from '../helpers/client.ts';
import { cliRunner } from '../helpers/cli.ts';

const portico = await startPortico();
t.teardown(async () => {
  await portico.stop();
  cleanup(portico.dataDir, portico.certsDir);
});
const adminUrl = `http://127.0.0.1:${portico.ports.admin}`;
const cli = cliRunner({ PORTICO_ADMIN_URL: adminUrl, PORTICO_ADMIN_TOKEN: ADMIN_TOKEN });
t.teardown(() => cli.close());

const ACCOUNT_ID = /\bacc_[A-Za-z0-9_-]+/;
const KEY_ID = /\bkey_[A-Za-z0-9_-]+/;
const LIVE_KEY = /pk_live_[A-Za-z0-9_-]{43}/g;
const TEST_KEY = /pk_test_[A-Za-z0-9_-]{43}/g;

/** setup through the admin API directly: each CLI run costs a Node start */
const createAccount = async (plan: string): Promise<string> => {
  const answer = await admin(portico.ports.admin, 'POST', '/admin/accounts', { plan });
  if (answer.status !== 201) throw new Error(`account: ${answer.status} ${answer.text}`);
  return answer.json.id;
};

t.test('accounts create --plan pro prints the account id', async (t) => {
  const run = await cli(['accounts', 'create', '--plan', 'pro']);
  t.equal(run.code, 0, run.stderr);
  const id = run.stdout.match(ACCOUNT_ID)?.[0];
  t.ok(id, `prints an account id: ${run.stdout.trim()}`);
  const stored = await admin(portico.ports.admin, 'GET', `/admin/accounts/${id}`);
  t.equal(stored.status, 200, 'the printed id is a real account');
  t.match(stored.json, { id, plan: 'pro' });
});

t.test('accounts create --json prints the account as JSON', async (t) => {
  const run = await cli(['accounts', 'create', '--plan', 'free', '--json']);
  t.equal(run.code, 0, run.stderr);
  const body = JSON.parse(run.stdout);
  t.match(body, { id: ACCOUNT_ID, plan: 'free', limits: { perMinute: 60, perDay: 1000 } });
  t.equal((await admin(portico.ports.admin, 'GET', `/admin/accounts/${body.id}`)).status, 200);
});

t.test('accounts create --plan enterprise --per-minute 5 --per-day 50', async (t) => {
  const run = await cli(['accounts', 'create', '--plan', 'enterprise', '--per-minute', '5', '--per-day', '50', '--json']);
  t.equal(run.code, 0, run.stderr);
  const body = JSON.parse(run.stdout);
  t.match(body, { plan: 'enterprise', limits: { perMinute: 5, perDay: 50 } });
  const stored = await admin(portico.ports.admin, 'GET', `/admin/accounts/${body.id}`);
  t.match(stored.json, { plan: 'enterprise', limits: { perMinute: 5, perDay: 50 } });
});

t.test('accounts set ID --plan business', async (t) => {
  const id = await createAccount('pro');
  const run = await cli(['accounts', 'set', id, '--plan', 'business']);
  t.equal(run.code, 0, run.stderr);
  t.match(run.stdout, id);
  t.match(run.stdout, 'business');
  const stored = await admin(portico.ports.admin, 'GET', `/admin/accounts/${id}`);
  t.match(stored.json, { id, plan: 'business', limits: { perMinute: 1000, perDay: 100000 } });
});

t.test('keys create prints a pk_live_ key once, and it works on /v1; keys revoke stops it', async (t) => {
  const id = await createAccount('pro');
  const run = await cli(['keys', 'create', '--account', id]);
  t.equal(run.code, 0, run.stderr);
  const keys: string[] = run.stdout.match(LIVE_KEY) ?? [];
  t.equal(keys.length, 1, 'the key is printed exactly once');
  t.equal(run.stderr.match(LIVE_KEY), null, 'and not on stderr');
  const keyId = run.stdout.match(KEY_ID)?.[0];
  t.ok(keyId, 'the key id is printed');
  const key = keys[0];

  const works = await api(portico.ports.https, portico.ca, key, { path: '/v1/categories' });
  t.equal(works.status, 200, 'the printed key works on /v1');
  const created = await api(portico.ports.https, portico.ca, key, { method: 'POST', path: '/v1/categories', json: { name: 'cli' } });
  t.equal(created.status, 201);

  const revoke = await cli(['keys', 'revoke', keyId!]);
  t.equal(revoke.code, 0, revoke.stderr);
  t.match(revoke.stdout, keyId!);
  const refused = await api(portico.ports.https, portico.ca, key, { path: '/v1/categories' });
  t.equal(refused.status, 401, 'a revoked key gets 401');

  const again = await cli(['keys', 'revoke', 'key_doesnotexist']);
  t.equal(again.code, 1, 'revoking an unknown key fails');
  t.match(again.stderr, /404/);
});

t.test('keys create --environment staging prints a pk_test_ key that works on staging only', async (t) => {
  const id = await createAccount('pro');
  const run = await cli(['keys', 'create', '--account', id, '--environment', 'staging']);
  t.equal(run.code, 0, run.stderr);
  const keys: string[] = run.stdout.match(TEST_KEY) ?? [];
  t.equal(keys.length, 1, 'one pk_test_ key');
  t.equal(run.stdout.match(LIVE_KEY), null, 'no pk_live_ key');
  const staging = await api(portico.ports.https, portico.ca, keys[0], { path: '/v1/categories', hostname: 'api.staging.localhost' });
  t.equal(staging.status, 200);
  const production = await api(portico.ports.https, portico.ca, keys[0], { path: '/v1/categories' });
  t.equal(production.status, 401);
});

t.test('--help and COMMAND --help exit 0 with usage text', async (t) => {
  const [top, sub] = await Promise.all([
    cli(['--help'], { PORTICO_ADMIN_URL: undefined, PORTICO_ADMIN_TOKEN: undefined }),
    cli(['accounts', 'create', '--help']),
  ]);
  t.equal(top.code, 0);
  t.match(top.stdout, /^Usage: portico/m);
  for (const command of ['accounts create', 'accounts set', 'keys create', 'keys revoke', 'serve']) t.match(top.stdout, command);

  t.equal(sub.code, 0);
  t.match(sub.stdout, /Usage: portico accounts create/);
  t.match(sub.stdout, '--plan');
  t.match(sub.stdout, '--per-minute');
  t.equal(sub.stderr, '');
});

t.test('usage errors exit 2', async (t) => {
  const [unknown, badOption] = await Promise.all([
    cli(['frobnicate', 'now']),
    cli(['accounts', 'create', '--plan', 'pro', '--colour', 'red']),
  ]);
  t.equal(unknown.code, 2, 'an unknown command exits 2');
  t.match(unknown.stderr, /unknown command "frobnicate now"/);
  t.match(unknown.stderr, /Usage: portico/);
  t.equal(badOption.code, 2, 'an unknown option exits 2');
  t.match(badOption.stderr, /colour/);
});

t.test('a wrong admin token exits 1 with a message naming 401', async (t) => {
  const run = await cli(['accounts', 'create', '--plan', 'pro'], { PORTICO_ADMIN_TOKEN: 'wrong-token-0123456789abcdef' });
  t.equal(run.code, 1);
  t.match(run.stderr, /401/);
  t.match(run.stderr, /unauthorized/);
  t.equal(run.stdout, '');
});

t.test('a bad plan exits 1 with the server\'s message', async (t) => {
  const run = await cli(['accounts', 'create', '--plan', 'platinum']);
  t.equal(run.code, 1);
  const direct = await admin(portico.ports.admin, 'POST', '/admin/accounts', { plan: 'platinum' });
  t.equal(direct.status, 400);
  t.match(run.stderr, /400/);
  t.match(run.stderr, direct.json.message, 'the server\'s own message');
  t.equal(run.stdout, '');
});

t.test('an unreachable admin API exits 1 saying so', async (t) => {
  const closed = await new Promise<number>((resolve) => {
    // a port that was just free: bind, note it, close
    import('node:net').then(({ createServer }) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const port = (s.address() as { port: number }).port;
        s.close(() => resolve(port));
      });
    });
  });
  const run = await cli(['accounts', 'create', '--plan', 'pro'], { PORTICO_ADMIN_URL: `http://127.0.0.1:${closed}` });
  t.equal(run.code, 1);
  t.match(run.stderr, /cannot reach the admin API/);
});

t.test('without PORTICO_ADMIN_TOKEN the CLI reads admin-token from PORTICO_DATA_DIR', async (t) => {
  const dir = tempDir('cli-token');
  t.teardown(() => cleanup(dir));

  const none = await cli(['accounts', 'create', '--plan', 'pro'], { PORTICO_ADMIN_TOKEN: undefined, PORTICO_DATA_DIR: dir });
  t.equal(none.code, 1, 'no token anywhere: exit 1');
  t.match(none.stderr, /no admin token/);
  t.match(none.stderr, path.join(dir, 'admin-token'), 'names the file it looked for');

  writeFileSync(path.join(dir, 'admin-token'), `${portico.running.adminToken}\n`, { mode: 0o600 });
  const run = await cli(['accounts', 'create', '--plan', 'pro', '--json'], { PORTICO_ADMIN_TOKEN: undefined, PORTICO_DATA_DIR: dir });
  t.equal(run.code, 0, run.stderr);
  const body = JSON.parse(run.stdout);
  t.equal((await admin(portico.ports.admin, 'GET', `/admin/accounts/${body.id}`)).status, 200, 'the account was made with the file\'s token');

  writeFileSync(path.join(dir, 'admin-token'), 'another-token-that-is-wrong\n');
  const wrong = await cli(['accounts', 'create', '--plan', 'pro'], { PORTICO_ADMIN_TOKEN: undefined, PORTICO_DATA_DIR: dir });
  t.equal(wrong.code, 1, 'the file is really what is used: a wrong one fails');
  t.match(wrong.stderr, /401/);
});
