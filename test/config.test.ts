// DESIGN §2: config/portico.yaml holds the documented defaults, every PORTICO_* variable overrides
// its setting, and an invalid configuration is refused with one error listing every problem.
import t, { type Test } from 'tap';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ConfigError, cliSettings, loadConfig, parseCidr, parseConfig, type Config } from '../src/config.ts';
import { cleanup, tempDir } from './helpers/portico.ts';
import { selfSigned } from '../src/certs/fallback.ts';

const ROOT = path.resolve(import.meta.dirname, '..');
const DEFAULT_FILE = path.join(ROOT, 'config/portico.yaml');
const YAML = readFileSync(DEFAULT_FILE, 'utf8');
const TOKEN = 'an-admin-token-of-32-characters!';

/** the default file with `env` applied */
function withEnv(env: Record<string, string>, text = YAML, cwd = ROOT): Config {
  return parseConfig(text, DEFAULT_FILE, env, cwd);
}

/** the ConfigError that `run` throws */
function configError(t: Test, run: () => unknown): ConfigError {
  try {
    run();
  } catch (err) {
    t.type(err, ConfigError);
    return err as ConfigError;
  }
  t.fail('expected a ConfigError');
  return new ConfigError([]);
}

t.test('defaults from config/portico.yaml match DESIGN §2', async (t) => {
  const config = loadConfig({}, ROOT);
  t.equal(config.configFile, DEFAULT_FILE);
  t.equal(config.http.port, 8080);
  t.equal(config.https.port, 8443);
  t.equal(config.https.publicPort, 443);
  t.equal(config.admin.port, 9180);
  t.equal(config.admin.host, '127.0.0.1');
  t.equal(config.admin.token, null, 'generated at start, not configured');
  t.equal(config.metrics.port, null);
  t.equal(config.dataDir, path.join(ROOT, 'data'));
  t.equal(config.certsDir, path.join(ROOT, 'certs'));
  t.equal(config.redis.url, null, 'embedded state by default');
  t.equal(config.platform.domain, 'localhost');
  t.equal(config.platform.certFile, null);
  t.equal(config.platform.keyFile, null);
  t.equal(config.platform.cnameTarget, 'edge.localhost');
  t.strictSame(config.dns.servers, [], 'system resolvers');
  t.equal(config.acme.directory, 'https://acme-staging-v02.api.letsencrypt.org/directory', "Let's Encrypt staging");
  t.equal(config.acme.email, null);
  t.strictSame(config.api.hosts, ['api.localhost', 'localhost', '127.0.0.1']);
  t.strictSame(config.api.stagingHosts, ['api.staging.localhost']);
  t.strictSame(config.trustedProxies, []);
  t.equal(config.proxyProtocol, false);
  t.equal(config.api.maxCategories, 10_000);
  t.equal(config.api.maxBodyBytes, 65_536);
});

t.test('the defaults in the code are the ones the file documents', async (t) => {
  const fromFile = withEnv({});
  const fromCode = parseConfig('', DEFAULT_FILE, {}, ROOT);
  t.strictSame(fromCode, fromFile);
});

t.test('PORTICO_CONFIG points at another file, relative to the working directory', async (t) => {
  const dir = tempDir('config');
  t.teardown(() => cleanup(dir));
  mkdirSync(path.join(dir, 'etc'));
  writeFileSync(path.join(dir, 'etc/other.yaml'), 'http:\n  port: 7000\nplatform:\n  domain: example.net\ndataDir: state\n');
  const config = loadConfig({ PORTICO_CONFIG: 'etc/other.yaml' }, dir);
  t.equal(config.configFile, path.join(dir, 'etc/other.yaml'));
  t.equal(config.http.port, 7000);
  t.equal(config.platform.domain, 'example.net');
  t.equal(config.dataDir, path.join(dir, 'state'), 'relative paths resolve against the working directory');
  t.equal(config.https.port, 8443, 'unset settings keep their defaults');
  // the variable beats the file
  t.equal(loadConfig({ PORTICO_CONFIG: 'etc/other.yaml', PORTICO_HTTP_PORT: '7001' }, dir).http.port, 7001);
});

t.test('without PORTICO_CONFIG: config/portico.yaml of the working directory, else the install\'s defaults', async (t) => {
  const elsewhere = tempDir('config');
  t.teardown(() => cleanup(elsewhere));
  const installed = loadConfig({}, elsewhere);
  t.equal(installed.configFile, DEFAULT_FILE, 'started from a directory with no config/: the defaults that come with Portico');
  t.equal(installed.dataDir, path.join(elsewhere, 'data'), 'its relative paths are the working directory\'s');
  mkdirSync(path.join(elsewhere, 'config'));
  writeFileSync(path.join(elsewhere, 'config/portico.yaml'), 'http:\n  port: 7002\n');
  const local = loadConfig({}, elsewhere);
  t.equal(local.configFile, path.join(elsewhere, 'config/portico.yaml'), 'a local config/portico.yaml wins');
  t.equal(local.http.port, 7002);
});

t.test('every PORTICO_* variable of DESIGN §2 overrides its setting', async (t) => {
  const dir = tempDir('config-env');
  t.teardown(() => cleanup(dir));
  // the platform pair is loaded and checked with the rest of the configuration
  const pair = await selfSigned(['*.apps.example.com'], 30);
  mkdirSync(path.join(dir, 'tls'));
  writeFileSync(path.join(dir, 'tls/wildcard.crt'), pair.cert);
  writeFileSync(path.join(dir, 'tls/wildcard.key'), pair.key);
  const config = withEnv(
    {
      PORTICO_HTTP_PORT: '18080',
      PORTICO_HTTPS_PORT: ' 18443 ',
      PORTICO_PUBLIC_HTTPS_PORT: '8443',
      PORTICO_ADMIN_PORT: '19180',
      PORTICO_ADMIN_HOST: '::1',
      PORTICO_METRICS_PORT: '19181',
      PORTICO_ADMIN_TOKEN: TOKEN,
      PORTICO_DATA_DIR: 'var/data',
      PORTICO_CERTS_DIR: path.join(dir, 'srv/portico/certs'),
      PORTICO_REDIS_URL: 'redis://10.0.0.5:6380/2',
      PORTICO_PLATFORM_DOMAIN: 'Apps.Example.COM',
      PORTICO_PLATFORM_CERT_FILE: path.join(dir, 'tls/wildcard.crt'),
      PORTICO_PLATFORM_KEY_FILE: path.join(dir, 'tls/wildcard.key'),
      PORTICO_CNAME_TARGET: 'edge.example.com',
      PORTICO_DNS_SERVERS: '127.0.0.1:8053, [::1]:53,192.0.2.53',
      PORTICO_ACME_DIRECTORY: 'https://localhost:14000/dir',
      PORTICO_ACME_EMAIL: 'ops@example.com',
      PORTICO_API_HOSTS: 'API.example.com, example.com,,',
      PORTICO_STAGING_API_HOSTS: 'api.staging.example.com',
      PORTICO_TRUSTED_PROXIES: '10.0.0.0/8, 192.168.1.7,fd00::/8',
      PORTICO_PROXY_PROTOCOL: 'true',
    },
    YAML,
    dir,
  );
  t.equal(config.http.port, 18080);
  t.equal(config.https.port, 18443, 'ports are trimmed');
  t.equal(config.https.publicPort, 8443);
  t.equal(config.admin.port, 19180);
  t.equal(config.admin.host, '::1');
  t.equal(config.metrics.port, 19181);
  t.equal(config.admin.token, TOKEN);
  t.equal(config.dataDir, path.join(dir, 'var/data'));
  t.equal(config.certsDir, path.join(dir, 'srv/portico/certs'), 'an absolute path stays as it is');
  t.equal(config.redis.url, 'redis://10.0.0.5:6380/2');
  t.equal(config.platform.domain, 'apps.example.com', 'hostnames are lowercased');
  t.equal(config.platform.certFile, path.join(dir, 'tls/wildcard.crt'));
  t.equal(config.platform.keyFile, path.join(dir, 'tls/wildcard.key'));
  t.equal(config.platform.cnameTarget, 'edge.example.com');
  t.strictSame(config.dns.servers, ['127.0.0.1:8053', '[::1]:53', '192.0.2.53']);
  t.equal(config.acme.directory, 'https://localhost:14000/dir');
  t.equal(config.acme.email, 'ops@example.com');
  t.strictSame(config.api.hosts, ['api.example.com', 'example.com'], 'lists split on commas, trimmed, empties dropped, lowercased');
  t.strictSame(config.api.stagingHosts, ['api.staging.example.com']);
  t.strictSame(config.trustedProxies, ['10.0.0.0/8', '192.168.1.7', 'fd00::/8']);
  t.equal(config.proxyProtocol, true);
});

t.test('boolean and port variables accept their spellings', async (t) => {
  for (const on of ['true', 'TRUE', '1', 'on', 'yes']) t.equal(withEnv({ PORTICO_PROXY_PROTOCOL: on, PORTICO_TRUSTED_PROXIES: '10.0.0.1' }).proxyProtocol, true, on);
  for (const off of ['false', 'False', '0', 'off', 'no']) {
    t.equal(withEnv({ PORTICO_PROXY_PROTOCOL: off }, YAML.replace('proxyProtocol: false', 'proxyProtocol: true')).proxyProtocol, false, off);
  }
  t.equal(withEnv({ PORTICO_HTTP_PORT: '0' }).http.port, 0, 'port 0: any free port');
  t.equal(withEnv({ PORTICO_HTTP_PORT: '65535' }).http.port, 65535);
  t.equal(withEnv({ PORTICO_HTTP_PORT: '' }).http.port, 8080, 'an empty variable counts as unset');
  t.equal(withEnv({ PORTICO_PLATFORM_DOMAIN: 'example.org.' }).platform.domain, 'example.org', 'a trailing dot is dropped');
});

t.test('an admin token that is blank or cannot travel in a header is refused, and never repeated', async (t) => {
  for (const [token, reason] of [['                    ', /it is blank/], ['a-token-of-20-chars\nX-Injected: 1', /printable ASCII/], ['a-token-with-ünicode-1234', /printable ASCII/]] as const) {
    const err = configError(t, () => withEnv({ PORTICO_ADMIN_TOKEN: token }));
    t.match(err.problems[0], reason);
    // a blank one as it would be quoted, another by its first characters
    const shown = token.trim() === '' ? JSON.stringify(token) : token.slice(0, 10);
    t.notOk(err.message.includes(shown), 'the value is not in the message');
  }
});

t.test('an invalid configuration lists every problem at once, each naming its setting', async (t) => {
  const err = configError(t, () =>
    withEnv(
      {
        PORTICO_HTTP_PORT: 'abc',
        PORTICO_ADMIN_TOKEN: 'short',
        PORTICO_TRUSTED_PROXIES: 'not-a-cidr',
      },
      `${YAML}\ncolour: blue\n`,
    ),
  );
  t.equal(err.problems.length, 4, err.problems.join(' | '));
  t.match(err.problems[0], /^http\.port \(PORTICO_HTTP_PORT\) must be a port number 0–65535, got "abc"$/);
  t.match(err.problems[1], /^admin\.token \(PORTICO_ADMIN_TOKEN\) must be at least 16 characters$/);
  t.match(err.problems[2], /^trustedProxies \(PORTICO_TRUSTED_PROXIES\): "not-a-cidr" is not an IP address or CIDR$/);
  t.match(err.problems[3], /^colour is not a known setting$/);
  for (const problem of err.problems) t.ok(err.message.includes(problem), `the message lists: ${problem}`);
  t.match(err.message, /^invalid configuration:\n {2}- /);
});

t.test('more kinds of problems, still all reported together', async (t) => {
  const err = configError(t, () =>
    withEnv(
      {
        PORTICO_HTTPS_PORT: '70000',
        PORTICO_PUBLIC_HTTPS_PORT: '-1',
        PORTICO_METRICS_PORT: '80.5',
        PORTICO_PROXY_PROTOCOL: 'maybe',
        PORTICO_REDIS_URL: 'http://10.0.0.5:6379',
        PORTICO_ACME_DIRECTORY: 'not a url',
        PORTICO_PLATFORM_DOMAIN: 'not a hostname!',
        PORTICO_PLATFORM_CERT_FILE: '/etc/tls/only-the-cert.crt',
        PORTICO_DNS_SERVERS: '127.0.0.1:53,bad server',
        PORTICO_LOG_LEVEL: 'loud',
      },
      YAML.replace('  upstreamMs: 30000', '  upstreamMs: soon').replace('  port: 8080 ', '  typo: 1\n  port: 8080 '),
    ),
  );
  const expected: RegExp[] = [
    /^https\.port \(PORTICO_HTTPS_PORT\) must be a port number 0–65535, got 70000$/,
    /^https\.publicPort \(PORTICO_PUBLIC_HTTPS_PORT\) must be a port number 1–65535, got "-1"$/,
    /^metrics\.port \(PORTICO_METRICS_PORT\) must be a port number 0–65535, got "80\.5"$/,
    /^redis\.url \(PORTICO_REDIS_URL\) must be one of redis:\/\/\[user:password@\]host:port/,
    /^platform\.domain \(PORTICO_PLATFORM_DOMAIN\) must be a hostname/,
    /^acme\.directory \(PORTICO_ACME_DIRECTORY\) must be a URL/,
    /^proxyProtocol \(PORTICO_PROXY_PROTOCOL\) must be true\/on\/yes\/1 or false\/off\/no\/0, got "maybe"$/,
    /^timeouts\.upstreamMs must be an integer/,
    /^log\.level \(PORTICO_LOG_LEVEL\) must be one of/,
    /^dns\.servers \(PORTICO_DNS_SERVERS\): "bad server" is not an IP address with an optional port/,
    /^platform\.certFile and platform\.keyFile .* go together$/,
    /^http\.typo is not a known setting$/,
  ];
  t.equal(err.problems.length, expected.length, err.problems.join('\n'));
  for (const pattern of expected) t.ok(err.problems.some((p) => pattern.test(p)), `reported: ${pattern}`);
});

// Node fires a timer longer than 2^31 − 1 ms after 1 ms: `upstreamMs: 3000000000` answered every
// proxied request 504 after ~20 ms and `shutdownMs` cut in-flight requests at once, with only a
// TimeoutOverflowWarning on stderr. A duration a timer cannot wait is refused at start.
t.test('a duration longer than a timer can wait is a problem, naming the setting', async (t) => {
  const err = configError(t, () =>
    withEnv(
      { PORTICO_VERIFIED_RECHECK_MS: '2147483648' },
      YAML.replace('  upstreamMs: 30000', '  upstreamMs: 3000000000').replace('  shutdownMs: 10000', '  shutdownMs: 99999999999'),
    ),
  );
  t.strictSame(err.problems.sort(), [
    'domains.verifiedRecheckMs (PORTICO_VERIFIED_RECHECK_MS) must be at most 2147483647 ms (about 24.8 days, the longest a timer waits), got 2147483648',
    'timeouts.shutdownMs must be at most 2147483647 ms (about 24.8 days, the longest a timer waits), got 99999999999',
    'timeouts.upstreamMs must be at most 2147483647 ms (about 24.8 days, the longest a timer waits), got 3000000000',
  ]);
  t.equal(withEnv({ PORTICO_VERIFIED_RECHECK_MS: '2147483647' }).domains.verifiedRecheckMs, 2_147_483_647, 'the longest is accepted');
});

t.test('two listeners on one port is a problem', async (t) => {
  const err = configError(t, () => withEnv({ PORTICO_HTTP_PORT: '9180' }));
  t.strictSame(err.problems, ['http.port and admin.port are both 9180']);
  t.doesNotThrow(() => withEnv({ PORTICO_HTTP_PORT: '0', PORTICO_HTTPS_PORT: '0', PORTICO_ADMIN_PORT: '0' }), 'port 0 may repeat');
});

t.test('https.keyExchange: null is the default; a list of groups this OpenSSL knows, else one problem naming the strangers', async (t) => {
  t.equal(withEnv({}).https.keyExchange, null, 'the built-in order');
  t.strictSame(withEnv({ PORTICO_HTTPS_KEY_EXCHANGE: 'X25519, P-256' }).https.keyExchange, ['X25519', 'P-256'], 'the variable is a comma list');
  t.strictSame(withEnv({}, YAML.replace('keyExchange: null', 'keyExchange: [P-384]')).https.keyExchange, ['P-384'], 'and the file a YAML list');
  const err = configError(t, () => withEnv({ PORTICO_HTTPS_KEY_EXCHANGE: 'X25519,x25519-nope,X25519:P-256,P-256' }));
  t.equal(err.problems.length, 1, err.message);
  t.match(err.problems[0], /^https\.keyExchange \(PORTICO_HTTPS_KEY_EXCHANGE\): "x25519-nope", "X25519:P-256" are not key exchange groups this Node's OpenSSL \S+ knows/);
  t.notMatch(err.problems[0], /"P-256"|"X25519",/, 'the known names are not listed');
  t.strictSame(configError(t, () => withEnv({}, YAML.replace('keyExchange: null', 'keyExchange: []'))).problems, ['https.keyExchange (PORTICO_HTTPS_KEY_EXCHANGE) must name at least one group, or be null for the default']);
  t.strictSame(withEnv({ PORTICO_HTTPS_KEY_EXCHANGE: 'auto' }).https.keyExchange, ['auto'], "'auto' alone: OpenSSL's default");
  t.strictSame(configError(t, () => withEnv({ PORTICO_HTTPS_KEY_EXCHANGE: 'auto,X25519' })).problems, ['https.keyExchange (PORTICO_HTTPS_KEY_EXCHANGE): OpenSSL refuses the list "auto,X25519" as a whole (`auto` must stand alone)']);
  t.strictSame(configError(t, () => withEnv({}, YAML.replace('keyExchange: null', 'keyExchange: X25519'))).problems, ['https.keyExchange (PORTICO_HTTPS_KEY_EXCHANGE) must be a list of strings, got "X25519"'], 'a bare string is not a list, said once');
});

t.test('a typo inside a rate-limit plan is a problem, not silently ignored', async (t) => {
  const err = configError(t, () => withEnv({}, YAML.replace('free: { perMinute: 60, perDay: 1000 }', 'free: { perMinute: 60, perDai: 1000 }')));
  t.strictSame(err.problems, ['ratelimit.plans.free.perDai is not a known setting']);
});

t.test('bad YAML and an unreadable file are reported with the file name', async (t) => {
  const bad = configError(t, () => parseConfig('http:\n  port: [8080\n', '/etc/portico/bad.yaml', {}, ROOT));
  t.equal(bad.problems.length, 1);
  t.match(bad.problems[0], /^\/etc\/portico\/bad\.yaml is not valid YAML: /);

  const list = configError(t, () => parseConfig('- a\n- b\n', '/etc/portico/list.yaml', {}, ROOT));
  t.strictSame(list.problems, ['/etc/portico/list.yaml must hold a mapping at the top level']);

  const dir = tempDir('config-missing');
  t.teardown(() => cleanup(dir));
  const missing = configError(t, () => loadConfig({ PORTICO_CONFIG: 'nope.yaml' }, dir));
  t.equal(missing.problems.length, 1);
  t.match(missing.problems[0], `cannot read ${path.join(dir, 'nope.yaml')}`);
});

t.test('the returned config is frozen, all the way down', async (t) => {
  const config = withEnv({ PORTICO_TRUSTED_PROXIES: '10.0.0.0/8' });
  t.ok(Object.isFrozen(config));
  t.ok(Object.isFrozen(config.http));
  t.ok(Object.isFrozen(config.api.hosts));
  t.ok(Object.isFrozen(config.ratelimit.plans.free));
  t.throws(() => {
    (config.http as { port: number }).port = 1;
  }, TypeError);
  t.throws(() => {
    (config.trustedProxies as string[]).push('0.0.0.0/0');
  }, TypeError);
  t.equal(config.http.port, 8080);
  t.strictSame(config.trustedProxies, ['10.0.0.0/8']);
});

t.test('parseCidr reads addresses and CIDRs, and nothing else', async (t) => {
  t.strictSame(parseCidr('10.0.0.0/8'), ['10.0.0.0', 8, 'ipv4']);
  t.strictSame(parseCidr('192.168.1.7'), ['192.168.1.7', 32, 'ipv4']);
  t.strictSame(parseCidr('0.0.0.0/0'), ['0.0.0.0', 0, 'ipv4']);
  t.strictSame(parseCidr('::1'), ['::1', 128, 'ipv6']);
  t.strictSame(parseCidr('fd00::/8'), ['fd00::', 8, 'ipv6']);
  for (const bad of ['not-a-cidr', '10.0.0.0/33', '::/129', '10.0.0.0/-1', '10.0.0/8', '', '10.0.0.0/8.5']) {
    t.equal(parseCidr(bad), null, JSON.stringify(bad));
  }
});

t.test('parseCidr: an empty or malformed prefix is not /0 (trusting every address)', async (t) => {
  for (const bad of ['10.0.0.1/', '10.0.0.0/8/16', '10.0.0.0/ 8', '10.0.0.0/0x8', '10.0.0.0/1e1']) {
    t.equal(parseCidr(bad), null, JSON.stringify(bad));
  }
  const err = configError(t, () => withEnv({ PORTICO_TRUSTED_PROXIES: '10.0.0.1/' }));
  t.strictSame(err.problems, ['trustedProxies (PORTICO_TRUSTED_PROXIES): "10.0.0.1/" is not an IP address or CIDR']);
});

t.test('cliSettings: the admin URL and the token, from the environment or the data dir', async (t) => {
  const dir = tempDir('cli');
  t.teardown(() => cleanup(dir));
  const dataDir = path.join(dir, 'data');
  mkdirSync(dataDir);
  writeFileSync(path.join(dataDir, 'admin-token'), 'token-from-the-data-dir-0123\n');

  t.strictSame(cliSettings({ PORTICO_DATA_DIR: dataDir }, dir), {
    url: 'http://127.0.0.1:9180',
    token: 'token-from-the-data-dir-0123',
    tokenFile: path.join(dataDir, 'admin-token'),
    tokenFrom: path.join(dataDir, 'admin-token'),
  });
  t.equal(cliSettings({}, dir).token, 'token-from-the-data-dir-0123', 'the default data dir is ./data under the working directory');
  t.equal(cliSettings({ PORTICO_DATA_DIR: 'data', PORTICO_ADMIN_TOKEN: TOKEN }, dir).tokenFrom, 'PORTICO_ADMIN_TOKEN', 'where the token came from, for a refusal to name');
  t.equal(cliSettings({ PORTICO_ADMIN_TOKEN: '' }, dir).token, 'token-from-the-data-dir-0123', 'an empty variable counts as unset');
  t.equal(cliSettings({ PORTICO_DATA_DIR: 'data', PORTICO_ADMIN_TOKEN: TOKEN }, dir).token, TOKEN, 'the variable wins over the file');
  t.equal(cliSettings({ PORTICO_DATA_DIR: path.join(dir, 'elsewhere') }, dir).token, null, 'no variable and no file');

  t.equal(cliSettings({ PORTICO_ADMIN_HOST: '::1', PORTICO_ADMIN_PORT: '9999' }, dir).url, 'http://[::1]:9999');
  t.equal(cliSettings({ PORTICO_ADMIN_HOST: '10.1.2.3' }, dir).url, 'http://10.1.2.3:9180');
  t.equal(cliSettings({ PORTICO_ADMIN_URL: 'https://admin.example.com:9443', PORTICO_ADMIN_PORT: '1' }, dir).url, 'https://admin.example.com:9443');
  // the CLI reads the file the server writes: <dataDir>/admin-token of the same configuration
  const config = withEnv({ PORTICO_DATA_DIR: 'data' }, YAML, dir);
  t.equal(cliSettings({ PORTICO_DATA_DIR: 'data' }, dir).tokenFile, path.join(config.dataDir, 'admin-token'));
});

t.test('a path setting starting with ~/ is under the home directory, as a shell would read it', async (t) => {
  // systemd's Environment= and YAML values are not expanded by a shell: ~/data was a directory named `~`
  const home = tempDir('home');
  const cwd = tempDir('cwd');
  const savedHome = process.env.HOME;
  process.env.HOME = home;
  t.teardown(() => {
    process.env.HOME = savedHome;
    cleanup(home);
    cleanup(cwd);
  });
  const pair = await selfSigned(['portico.example.com'], 30);
  mkdirSync(path.join(home, 'tls'));
  writeFileSync(path.join(home, 'tls/site.crt'), pair.cert);
  writeFileSync(path.join(home, 'tls/site.key'), pair.key);
  const config = withEnv({ PORTICO_DATA_DIR: '~/portico/data', PORTICO_PLATFORM_CERT_FILE: '~/tls/site.crt', PORTICO_PLATFORM_KEY_FILE: '~/tls/site.key' }, 'certsDir: ~/portico/certs\n', cwd);
  t.equal(config.dataDir, path.join(home, 'portico/data'));
  t.equal(config.certsDir, path.join(home, 'portico/certs'), 'in the file too');
  t.equal(config.platform.certFile, path.join(home, 'tls/site.crt'));
  t.equal(config.platform.keyFile, path.join(home, 'tls/site.key'));
  t.equal(withEnv({ PORTICO_DATA_DIR: '~' }, YAML, cwd).dataDir, home, '~ alone is the home directory');
  t.equal(withEnv({ PORTICO_DATA_DIR: '~data' }, YAML, cwd).dataDir, path.join(cwd, '~data'), 'another user\'s home (~name) is not looked up: a name like any other');
  t.equal(withEnv({ PORTICO_DATA_DIR: 'data' }, YAML, cwd).dataDir, path.join(cwd, 'data'), 'a relative path is the working directory\'s');

  // the CLI reads the token where the server writes it, and PORTICO_CONFIG is read the same way
  mkdirSync(path.join(home, 'portico/data'), { recursive: true });
  writeFileSync(path.join(home, 'portico/data/admin-token'), 'token-under-the-home-directory-01\n');
  t.equal(cliSettings({ PORTICO_DATA_DIR: '~/portico/data' }, cwd).token, 'token-under-the-home-directory-01');
  writeFileSync(path.join(home, 'portico.yaml'), 'http:\n  port: 7080\n');
  t.equal(loadConfig({ PORTICO_CONFIG: '~/portico.yaml' }, cwd).http.port, 7080);
});
