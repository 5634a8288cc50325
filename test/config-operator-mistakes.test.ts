// Mistakes an operator makes by accident that the configuration let through, or handled unlike its
// neighbours: regression tests for a tester's findings, one per finding.
import t, { type Test } from 'tap';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { cliSettings } from '../src/config.ts';
import { YAML, problems, refusal, withEnv } from './helpers/config-bed.ts';
import { ADMIN_TOKEN, cleanup, spawnPortico, startPortico, tempDir } from './helpers/portico.ts';
import { cliRunner } from './helpers/cli.ts';

function cliProblems(t: Test, env: Record<string, string>, cwd: string): string[] {
  return refusal(t, () => cliSettings(env, cwd), JSON.stringify(env));
}

const K8S_SERVICE_LINKS = {
  PORTICO_PORT: 'tcp://10.96.0.20:443',
  PORTICO_PORT_443_TCP: 'tcp://10.96.0.20:443',
  PORTICO_PORT_443_TCP_ADDR: '10.96.0.20',
  PORTICO_PORT_443_TCP_PORT: '443',
  PORTICO_PORT_443_TCP_PROTO: 'tcp',
  PORTICO_SERVICE_HOST: '10.96.0.20',
  PORTICO_SERVICE_PORT: '443',
  PORTICO_SERVICE_PORT_HTTPS: '443',
  PORTICO_ADMIN_SERVICE_HOST: '10.96.0.21',
  PORTICO_REDIS_PORT: 'tcp://10.96.0.22:6379',
};

// a Service named portico-admin or portico-metrics in the pod's namespace: Kubernetes sets these
const SHADOWING_LINKS = {
  PORTICO_ADMIN_PORT: 'tcp://10.96.0.21:9180',
  PORTICO_ADMIN_SERVICE_HOST: '10.96.0.21',
  PORTICO_ADMIN_SERVICE_PORT: '9180',
  PORTICO_METRICS_PORT: 'tcp://10.96.0.23:9190',
  PORTICO_METRICS_SERVICE_HOST: '10.96.0.23',
};

t.test('issue: a misspelled PORTICO_* variable was silently ignored', async (t) => {
  const warnings = withEnv({ PORTICO_REDIS_URI: 'redis://127.0.0.1:6379', PORTICO_ADMINTOKEN: ADMIN_TOKEN, PORTICO_HTTP_PROT: '8080', PORTICO_NOTHING_LIKE_IT: '1' }).warnings;
  t.strictSame(warnings, [
    'PORTICO_ADMINTOKEN is not a variable Portico reads; it is ignored. Did you mean PORTICO_ADMIN_TOKEN?',
    'PORTICO_HTTP_PROT is not a variable Portico reads; it is ignored. Did you mean PORTICO_HTTP_PORT?',
    'PORTICO_NOTHING_LIKE_IT is not a variable Portico reads; it is ignored',
    'PORTICO_REDIS_URI is not a variable Portico reads; it is ignored. Did you mean PORTICO_REDIS_URL?',
  ]);
  t.equal(withEnv({ PORTICO_REDIS_URI: 'redis://127.0.0.1:6379' }).redis.url, null, 'a warning, not a refusal');
  t.strictSame(withEnv(K8S_SERVICE_LINKS).warnings, [], "Kubernetes' service links are not mistakes");
  const known = ['PORTICO_CONFIG', 'PORTICO_ADMIN_URL', 'PORTICO_CLI_TIMEOUT_MS', 'PORTICO_COMPILE_CACHE', 'PORTICO_ADMIN_HOSTNAMES', 'PORTICO_HTTPS_KEY_EXCHANGE', 'PORTICO_REDIS_COMMAND_TIMEOUT_MS', 'PORTICO_API_UPSTREAM'];
  t.strictSame(withEnv(Object.fromEntries(known.map((name) => [name, '']))).warnings, [], 'every variable read in src/ is known');
  t.strictSame(withEnv({ PORTICO_HTTP_PORT: '8081' }).warnings, []);
});

t.test('issue: a misspelled variable: the started process says so once, naming the variable meant', async (t) => {
  const portico = await spawnPortico({ PORTICO_REDIS_URI: 'redis://127.0.0.1:1', PORTICO_ADMINTOKEN: 'x', ...K8S_SERVICE_LINKS, PORTICO_METRICS_PORT: SHADOWING_LINKS.PORTICO_METRICS_PORT, PORTICO_METRICS_SERVICE_HOST: SHADOWING_LINKS.PORTICO_METRICS_SERVICE_HOST });
  t.teardown(() => portico.kill());
  t.pass('started: a warning, not a refusal');
  // the start is over once it listens; its warnings come before
  const lines = portico.logs.filter((line) => line.includes('is not a variable Portico reads'));
  t.equal(lines.length, 2, 'one line for each misspelled variable');
  const entries = lines.map((line) => JSON.parse(line));
  t.ok(entries.length > 0 && entries.every((e) => e.level === 40), 'warn lines');
  t.ok(entries.some((e) => /PORTICO_REDIS_URI .*Did you mean PORTICO_REDIS_URL\?/.test(e.msg)), 'PORTICO_REDIS_URI → PORTICO_REDIS_URL');
  t.ok(entries.some((e) => /PORTICO_ADMINTOKEN .*Did you mean PORTICO_ADMIN_TOKEN\?/.test(e.msg)), 'PORTICO_ADMINTOKEN → PORTICO_ADMIN_TOKEN');
  t.notOk(portico.logs.some((line) => /PORTICO_(PORT|SERVICE_|ADMIN_SERVICE|REDIS_PORT)\w* is not/.test(line)), 'no word on the service links');
  // a Service named portico-metrics: started all the same, and said once
  t.equal(portico.logs.filter((line) => line.includes('PORTICO_METRICS_PORT=tcp://10.96.0.23:9190 is the Kubernetes service link')).length, 1, 'the shadowing link is named once');
});


t.test('issue: a Service named portico-admin or portico-metrics stopped the start (PORTICO_ADMIN_PORT=tcp://…)', async (t) => {
  const config = withEnv(SHADOWING_LINKS);
  t.equal(config.admin.port, 9180, "admin.port keeps the file's setting");
  t.equal(config.metrics.port, null, 'metrics.port stays unset');
  t.strictSame(config.warnings, [
    "PORTICO_ADMIN_PORT=tcp://10.96.0.21:9180 is the Kubernetes service link of a Service named portico-admin, not a port: ignored, admin.port keeps the file's setting. Set enableServiceLinks: false in the pod spec (or name the Service otherwise) to be rid of it",
    "PORTICO_METRICS_PORT=tcp://10.96.0.23:9190 is the Kubernetes service link of a Service named portico-metrics, not a port: ignored, metrics.port keeps the file's setting. Set enableServiceLinks: false in the pod spec (or name the Service otherwise) to be rid of it",
  ]);
  t.strictSame(problems(t, { PORTICO_ADMIN_PORT: 'tcp://10.96.0.21:9180' }), ['admin.port (PORTICO_ADMIN_PORT) must be a port number 0–65535, got "tcp://10.96.0.21:9180"'], 'without the Service beside it: a mistake');
  const dir = tempDir('cli-service-link');
  t.teardown(() => cleanup(dir));
  t.equal(cliSettings({ ...SHADOWING_LINKS, PORTICO_ADMIN_TOKEN: ADMIN_TOKEN }, dir).url, 'http://127.0.0.1:9180', 'the CLI in the pod finds the admin API on its port');
});

t.test('issue: PORTICO_ACME_EMAIL was not checked (mailto:mailto:…, not-an-email)', async (t) => {
  t.equal(withEnv({ PORTICO_ACME_EMAIL: 'mailto:ops@example.com' }).acme.email, 'ops@example.com', 'a leading mailto: is dropped');
  t.equal(withEnv({ PORTICO_ACME_EMAIL: ' MAILTO:ops+acme@mail.example.co.uk ' }).acme.email, 'ops+acme@mail.example.co.uk');
  t.equal(withEnv({}, YAML.replace(/^ {2}email: null/m, '  email: mailto:ops@example.com')).acme.email, 'ops@example.com', 'the file too');
  for (const bad of ['not-an-email', 'ops@localhost', 'ops@example.', 'ops @example.com', 'a@example.com,b@example.com', '@example.com', 'mailto:', 'ops@@example.com']) {
    t.strictSame(problems(t, { PORTICO_ACME_EMAIL: bad }), [`acme.email (PORTICO_ACME_EMAIL) must be an e-mail address such as ops@example.com, got ${JSON.stringify(bad)}`], bad);
  }
  t.strictSame(problems(t, {}, YAML.replace(/^ {2}email: null/m, '  email: not-an-email')), ['acme.email (PORTICO_ACME_EMAIL) must be an e-mail address such as ops@example.com, got "not-an-email"']);
});

t.test('issue: the CLI read PORTICO_ADMIN_HOST raw ([::1] → http://[[::1]]:9180, a trailing space)', async (t) => {
  const dir = tempDir('cli-host');
  t.teardown(() => cleanup(dir));
  t.equal(cliSettings({ PORTICO_ADMIN_HOST: '[::1]' }, dir).url, 'http://[::1]:9180');
  t.equal(cliSettings({ PORTICO_ADMIN_HOST: '127.0.0.1 ', PORTICO_ADMIN_PORT: ' 9181 ' }, dir).url, 'http://127.0.0.1:9181');
  t.equal(cliSettings({ PORTICO_DATA_DIR: ' state ' }, dir).tokenFile, path.join(dir, 'state/admin-token'));
  t.match(cliProblems(t, { PORTICO_ADMIN_HOST: 'admin.internal', PORTICO_ADMIN_PORT: '99999' }, dir), [/^admin\.host \(PORTICO_ADMIN_HOST\) must be an IP address/, /^admin\.port \(PORTICO_ADMIN_PORT\) must be a port number/], 'the server\'s messages');
});

t.test('issue: the CLI ignored PORTICO_CONFIG (admin.port and dataDir of the file)', async (t) => {
  const dir = tempDir('cli-config');
  const portico = await startPortico();
  const cli = cliRunner({});
  t.teardown(async () => {
    await portico.stop();
    cli.close();
    cleanup(dir);
  });
  mkdirSync(path.join(dir, 'state'));
  writeFileSync(path.join(dir, 'state/admin-token'), `${ADMIN_TOKEN}\n`);
  const file = path.join(dir, 'portico.yaml');
  writeFileSync(file, `admin:\n  port: ${portico.ports.admin}\ndataDir: ${path.join(dir, 'state')}\n`);
  const created = await cli(['accounts', 'create', '--plan', 'pro', '--json'], { PORTICO_CONFIG: file });
  t.equal(created.code, 0, created.stderr);
  t.match(JSON.parse(created.stdout), { plan: 'pro' });

  // a problem in a setting the CLI does not read is the server's to report
  writeFileSync(file, `admin:\n  port: ${portico.ports.admin}\ndataDir: ${path.join(dir, 'state')}\nhttp:\n  port: abc\ncolour: blue\n`);
  t.equal(cliSettings({ PORTICO_CONFIG: file }, dir).url, `http://127.0.0.1:${portico.ports.admin}`);
  t.equal(cliSettings({ PORTICO_CONFIG: file }, dir).token, ADMIN_TOKEN);
  t.equal(cliSettings({ PORTICO_CONFIG: file, PORTICO_ADMIN_PORT: '9999', PORTICO_ADMIN_TOKEN: 'from-the-variable-0123' }, dir).url, 'http://127.0.0.1:9999', 'the variables win, as for the server');
  t.equal(cliSettings({ PORTICO_CONFIG: file }, dir).tokenFile, path.join(dir, 'state/admin-token'));
  t.equal(cliSettings({ PORTICO_CONFIG: file }, dir).token, ADMIN_TOKEN);
  t.equal(cliSettings({}, dir).url, 'http://127.0.0.1:9180', 'no PORTICO_CONFIG: the install\'s defaults');
  // with the admin URL and token given, no file is needed at all
  t.equal(cliSettings({ PORTICO_CONFIG: path.join(dir, 'missing.yaml'), PORTICO_ADMIN_URL: 'http://127.0.0.1:1', PORTICO_ADMIN_TOKEN: 'from-the-variable-0123' }, dir).url, 'http://127.0.0.1:1');
  // one it needs that does not load stops the command
  t.match(cliProblems(t, { PORTICO_CONFIG: path.join(dir, 'missing.yaml') }, dir), [/^cannot read .*missing\.yaml/]);
  writeFileSync(file, 'admin:\n  port: 70000\n');
  t.strictSame(cliProblems(t, { PORTICO_CONFIG: file }, dir), ['admin.port (PORTICO_ADMIN_PORT) must be a port number 0–65535, got 70000']);
});

t.test('issue: an IP address was accepted as PORTICO_CNAME_TARGET and PORTICO_PLATFORM_DOMAIN', async (t) => {
  for (const [name, at] of [['PORTICO_CNAME_TARGET', 'platform.cnameTarget'], ['PORTICO_PLATFORM_DOMAIN', 'platform.domain']]) {
    for (const address of ['203.0.113.10', '0', '1.5', 'edge.example.123']) {
      t.strictSame(problems(t, { [name]: address }), [`${at} (${name}) must be a hostname, not an IP address or a name ending in a number (a CNAME target must be a hostname), got ${JSON.stringify(address)}`], `${name}=${address}`);
    }
    t.match(problems(t, { [name]: '::1' }), [new RegExp(`^${at.replace('.', '\\.')} \\(${name}\\) must be a hostname`)]);
  }
  t.equal(withEnv({ PORTICO_CNAME_TARGET: 'edge1.example.com2' }).platform.cnameTarget, 'edge1.example.com2', 'digits beside letters are a name');
  t.equal(withEnv({ PORTICO_PLATFORM_DOMAIN: '123.example.com' }).platform.domain, '123.example.com', 'an all-digit label before the last is fine');
});

t.test('issue: two ACME directories separated by a space were read as one URL', async (t) => {
  t.strictSame(problems(t, { PORTICO_ACME_DIRECTORY: 'https://a.example/dir https://b.example/dir' }), [
    'acme.directory (PORTICO_ACME_DIRECTORY): "https://a.example/dir https://b.example/dir" has a space in it; several directories are separated by commas',
  ]);
  t.strictSame(problems(t, { PORTICO_ACME_DIRECTORY: 'https://a.example/dir, https://b.example/dir\thttps://c.example/dir' }), [
    'acme.directory (PORTICO_ACME_DIRECTORY): "https://b.example/dir\\thttps://c.example/dir" has a space in it; several directories are separated by commas',
  ]);
  const text = YAML.replace(/^ {2}directory: .*$/m, '  directory: https://a.example/dir https://b.example/dir');
  t.equal(problems(t, {}, text).length, 1, 'in the file too');
  t.strictSame(withEnv({ PORTICO_ACME_DIRECTORY: ' https://a.example/dir , https://b.example/dir ' }).acme.issuers.map((i) => i.directory), ['https://a.example/dir', 'https://b.example/dir'], 'spaces around commas are fine');
});

t.test('issue: PORTICO_LOG_LEVEL and PORTICO_RATELIMIT_ON_REDIS_DOWN were not trimmed or case-folded', async (t) => {
  t.equal(withEnv({ PORTICO_LOG_LEVEL: 'debug ' }).log.level, 'debug');
  t.equal(withEnv({ PORTICO_LOG_LEVEL: 'INFO' }).log.level, 'info');
  t.equal(withEnv({ PORTICO_RATELIMIT_ON_REDIS_DOWN: 'closed ' }).ratelimit.onRedisDown, 'closed');
  t.equal(withEnv({}, YAML.replace(/^ {2}level: \w+/m, '  level: Warn')).log.level, 'warn', 'the file too');
  t.strictSame(problems(t, { PORTICO_LOG_LEVEL: ' loud ' }), ['log.level (PORTICO_LOG_LEVEL) must be one of trace, debug, info, warn, error, fatal, silent, got " loud "'], 'echoed as typed');
});

t.test('issue: a huge number was echoed rewritten (99999999999999999999 → 100000000000000000000)', async (t) => {
  t.strictSame(problems(t, { PORTICO_HTTP_PORT: '99999999999999999999' }), ['http.port (PORTICO_HTTP_PORT) must be a port number 0–65535, got "99999999999999999999"']);
  t.strictSame(problems(t, { PORTICO_REDIS_REPLICAS_TO_ACK: '9007199254740993' }), ['redis.replicasToAck (PORTICO_REDIS_REPLICAS_TO_ACK) must be an integer ≥ 0, got "9007199254740993"']);
  t.equal(withEnv({ PORTICO_REDIS_REPLICAS_TO_ACK: '9007199254740991' }).redis.replicasToAck, 9007199254740991, 'the largest safe integer is read');
});

t.test('issue: a blank list variable (" ", ",") silently became an empty list', async (t) => {
  const cases: Array<[string, string, string]> = [
    ['PORTICO_DNS_SERVERS', 'dns.servers', ' '],
    ['PORTICO_DNS_SERVERS', 'dns.servers', ','],
    ['PORTICO_STAGING_API_HOSTS', 'api.stagingHosts', ' '],
    ['PORTICO_ADMIN_HOSTNAMES', 'admin.hostnames', ' '],
    ['PORTICO_TRUSTED_PROXIES', 'trustedProxies', ' , '],
  ];
  for (const [name, at, value] of cases) {
    t.strictSame(problems(t, { [name]: value }), [`${at} (${name}) lists nothing, got ${JSON.stringify(value)}: an empty or unset variable keeps the file's setting (\`${at}: []\` there lists none)`], `${name}=${JSON.stringify(value)}`);
  }
  t.strictSame(withEnv({ PORTICO_STAGING_API_HOSTS: '', PORTICO_DNS_SERVERS: '' }).api.stagingHosts, ['api.staging.localhost'], 'an empty variable is an unset one');
  t.strictSame(withEnv({}, YAML.replace(/stagingHosts: .*/, 'stagingHosts: []')).api.stagingHosts, [], 'no staging hosts: said in the file');
  t.strictSame(problems(t, { PORTICO_API_HOSTS: ' ' }), ['api.hosts (PORTICO_API_HOSTS) must name at least one hostname'], 'a list that needs an entry says so itself, once');
  // the rest were errors already, with their type's message
  t.match(problems(t, { PORTICO_HTTP_PORT: ' ', PORTICO_ADMIN_HOST: ' ', PORTICO_ACME_EMAIL: ' ' }).length, 3);
});
