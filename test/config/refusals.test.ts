// Settings that used to pass the configuration and then failed later (or never): each one is now a
// problem in the one report, naming its variable. Regression tests for a tester's findings.
import t from 'tap';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { YAML, problems, withEnv } from '../helpers/config-bed.ts';
import { parseRedisUrl, redact } from '../../src/state/redis-url.ts';
import { selfSigned } from '../../src/certs/fallback.ts';
import { cleanup, tempDir } from '../helpers/portico.ts';
import { UNPARSEABLE_WITH_SECRETS } from '../helpers/redis-url-secrets.ts';

t.test('issue: a Redis URL that does not parse showed its password', async (t) => {
  const forms: ReadonlyArray<readonly [string, readonly string[]]> = [
    ...UNPARSEABLE_WITH_SECRETS,
    // parsed as far as the host or the path, which hold the password's tail
    ['redis://:S3cr3t@p:ss@127.0.0.1:26399', ['S3cr3t', 'p:ss']],
    ['redis://:S3cr3t@p:ss/wrd@127.0.0.1:26399', ['S3cr3t', 'p:ss', 'wrd']],
    ['redis+sentinel://u:S3cr3t@p/xy@127.0.0.1:26379/main/zz', ['S3cr3t', 'xy']],
  ];
  for (const [url, secrets] of forms) {
    const parsed = parseRedisUrl(url);
    t.ok(parsed instanceof Error, `refused: ${redact(url)}`);
    const found = problems(t, { PORTICO_REDIS_URL: url });
    t.equal(found.length, 1, found.join('\n'));
    t.match(found[0], /^redis\.url \(PORTICO_REDIS_URL\) /);
    t.match(found[0], /@127\.0\.0\.1:263\d\d/, 'the host is still shown');
    for (const secret of secrets) {
      t.notOk(found[0].includes(secret), `${JSON.stringify(secret)} is not in: ${found[0]}`);
      t.notOk(redact(url).includes(secret), `nor in the redacted form ${redact(url)}`);
    }
  }
  t.equal(redact('redis//:hunter2xyz@127.0.0.1:26399'), '***@127.0.0.1:26399', 'no scheme://: hidden from the start');
  t.equal(redact('rediss://:S3cr3t@p:ss/w#rd@h:1'), 'rediss://***@h:1', 'a scheme:// is kept');
});

t.test('issue: user:password with its @ forgotten showed the password as a port', async (t) => {
  const forms: ReadonlyArray<readonly [string, string]> = [
    ['redis://:hunter2xyz', 'redis://:***'],
    ['redis://app:hunter2xyz/0', 'redis://app:***/0'],
    ['redis+cluster://127.0.0.1:7000,:hunter2xyz', 'redis+cluster://127.0.0.1:7000,:***'],
  ];
  for (const [url, shown] of forms) {
    const found = problems(t, { PORTICO_REDIS_URL: url });
    t.equal(found.length, 1, found.join('\n'));
    t.notOk(found[0].includes('hunter2xyz'), `the password is not in: ${found[0]}`);
    t.ok(found[0].includes(JSON.stringify(shown)), `the URL is shown as ${shown}`);
    t.match(found[0], /a user and password end with an @/);
  }
});

t.test('issue: PORTICO_API_HOSTS and PORTICO_STAGING_API_HOSTS were not checked', async (t) => {
  const schemes = problems(t, { PORTICO_API_HOSTS: 'https://api.example.com,*.example.com' });
  t.equal(schemes.length, 1, schemes.join('\n'));
  t.match(schemes[0], /^api\.hosts \(PORTICO_API_HOSTS\) must list hostnames .*; not "https:\/\/api\.example\.com", "\*\.example\.com"$/);
  t.match(problems(t, { PORTICO_API_HOSTS: 'bad host,api.localhost' }), [/^api\.hosts \(PORTICO_API_HOSTS\) must list hostnames .*; not "bad host"$/]);
  t.strictSame(problems(t, { PORTICO_API_HOSTS: ',' }), ['api.hosts (PORTICO_API_HOSTS) must name at least one hostname']);
  t.strictSame(problems(t, {}, YAML.replace('hosts: [api.localhost, localhost, 127.0.0.1]', 'hosts: []')), ['api.hosts (PORTICO_API_HOSTS) must name at least one hostname'], 'in the file too');
  t.match(problems(t, { PORTICO_STAGING_API_HOSTS: 'api.staging.example.com,api.example.com:8443' }), [/^api\.stagingHosts \(PORTICO_STAGING_API_HOSTS\) must list hostnames .*; not "api\.example\.com:8443"$/]);
  t.strictSame(problems(t, { PORTICO_API_HOSTS: 'api.example.com,localhost', PORTICO_STAGING_API_HOSTS: 'API.example.com.' }), [
    'api.hosts (PORTICO_API_HOSTS) and api.stagingHosts (PORTICO_STAGING_API_HOSTS) both list "api.example.com": a hostname serves one environment',
  ]);
  const config = withEnv({ PORTICO_API_HOSTS: 'API.Example.com., 127.0.0.1, [::1]', PORTICO_STAGING_API_HOSTS: '' });
  t.strictSame(config.api.hosts, ['api.example.com', '127.0.0.1', '::1'], 'normalised as a Host header is: lowercase, no trailing dot, IPv6 without brackets');
  t.strictSame(withEnv({}, YAML.replace('stagingHosts: [api.staging.localhost]', 'stagingHosts: []')).api.stagingHosts, [], 'no staging hosts is allowed');
});

t.test('issue: PORTICO_DNS_SERVERS passed config and then failed in Resolver.setServers', async (t) => {
  const found = problems(t, { PORTICO_DNS_SERVERS: 'abc,dns.google:53,1.1.1.1:99999,1.1.1.1:0,[1.1.1.1]:53,[::1]:x' });
  t.strictSame(found, [
    'dns.servers (PORTICO_DNS_SERVERS): "abc" is not an IP address with an optional port (1.1.1.1, 1.1.1.1:53, [2606:4700:4700::1111]:53)',
    'dns.servers (PORTICO_DNS_SERVERS): "dns.google:53" is not an IP address with an optional port (1.1.1.1, 1.1.1.1:53, [2606:4700:4700::1111]:53)',
    'dns.servers (PORTICO_DNS_SERVERS): "1.1.1.1:99999" has a port outside 1–65535',
    'dns.servers (PORTICO_DNS_SERVERS): "1.1.1.1:0" has a port outside 1–65535',
    'dns.servers (PORTICO_DNS_SERVERS): "[1.1.1.1]:53" is not an IP address with an optional port (1.1.1.1, 1.1.1.1:53, [2606:4700:4700::1111]:53)',
    'dns.servers (PORTICO_DNS_SERVERS): "[::1]:x" has a port outside 1–65535',
  ]);
  const servers = ['1.1.1.1', '1.1.1.1:53', '127.0.0.1:8053', '[::1]', '[::1]:5353', '2606:4700:4700::1111'];
  t.strictSame(withEnv({ PORTICO_DNS_SERVERS: servers.join(',') }).dns.servers, servers, 'the forms node:dns takes');
  // and node:dns takes each of them
  const { Resolver } = await import('node:dns');
  t.doesNotThrow(() => new Resolver().setServers(servers));
});

t.test('issue: PORTICO_PUBLIC_HTTPS_PORT=0 was accepted and named in redirects', async (t) => {
  t.strictSame(problems(t, { PORTICO_PUBLIC_HTTPS_PORT: '0' }), ['https.publicPort (PORTICO_PUBLIC_HTTPS_PORT) must be a port number 1–65535, got 0']);
  t.equal(withEnv({ PORTICO_PUBLIC_HTTPS_PORT: '1' }).https.publicPort, 1);
  t.equal(withEnv({ PORTICO_HTTPS_PORT: '0' }).https.port, 0, 'a listener may still take any free port');
});

t.test('issue: PORTICO_ADMIN_HOST=abc passed config and failed at bind', async (t) => {
  t.strictSame(problems(t, { PORTICO_ADMIN_HOST: 'abc' }), ['admin.host (PORTICO_ADMIN_HOST) must be an IP address such as 127.0.0.1 or ::1, got "abc"']);
  t.match(problems(t, { PORTICO_ADMIN_HOST: 'localhost' }), [/^admin\.host \(PORTICO_ADMIN_HOST\) must be an IP address/], 'a name too, as for PORTICO_LISTEN_HOST');
  t.equal(withEnv({ PORTICO_ADMIN_HOST: '[::1]' }).admin.host, '::1');
  t.equal(withEnv({ PORTICO_ADMIN_HOST: '0.0.0.0' }).admin.host, '0.0.0.0');
});

t.test('issue: PORTICO_PROXY_PROTOCOL=maybe said "true or false" while on/yes/1 work', async (t) => {
  t.strictSame(problems(t, { PORTICO_PROXY_PROTOCOL: 'maybe' }), ['proxyProtocol (PORTICO_PROXY_PROTOCOL) must be true/on/yes/1 or false/off/no/0, got "maybe"']);
  // the file reads `on` as a string (YAML 1.2): the same words work there
  t.equal(withEnv({ PORTICO_TRUSTED_PROXIES: '10.0.0.1' }, YAML.replace('proxyProtocol: false', 'proxyProtocol: on')).proxyProtocol, true);
  t.equal(withEnv({}, YAML.replace('proxyProtocol: false', 'proxyProtocol: 0')).proxyProtocol, false);
  t.equal(withEnv({ PORTICO_PROXY_PROTOCOL: ' On ', PORTICO_TRUSTED_PROXIES: '10.0.0.1' }).proxyProtocol, true);
});

t.test('issue: a platform certificate that does not load was accepted, or failed with raw OpenSSL text', async (t) => {
  const dir = tempDir('platform-pair');
  t.teardown(() => cleanup(dir));
  const pair = await selfSigned(['*.apps.example.com'], 30);
  const other = await selfSigned(['*.apps.example.com'], 30);
  const file = (name: string, text: string) => {
    writeFileSync(path.join(dir, name), text);
    return path.join(dir, name);
  };
  const cert = file('ok.crt', pair.cert);
  const key = file('ok.key', pair.key);
  const empty = file('empty', '');
  const garbage = file('garbage.pem', '-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n');
  const pairEnv = (certFile: string, keyFile: string) => ({ PORTICO_PLATFORM_CERT_FILE: certFile, PORTICO_PLATFORM_KEY_FILE: keyFile });

  t.equal(withEnv(pairEnv(cert, key)).platform.certFile, cert, 'a matching pair is accepted');
  t.equal(withEnv(pairEnv(file('chain.crt', pair.cert + other.cert), key)).platform.certFile, path.join(dir, 'chain.crt'), 'a leaf followed by its chain too');
  t.strictSame(problems(t, pairEnv(empty, empty)), [
    `platform.certFile (PORTICO_PLATFORM_CERT_FILE): ${empty} is empty`,
    `platform.keyFile (PORTICO_PLATFORM_KEY_FILE): ${empty} is empty`,
  ]);
  t.strictSame(problems(t, pairEnv(garbage, garbage)), [
    `platform.certFile (PORTICO_PLATFORM_CERT_FILE): ${garbage} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`,
    `platform.keyFile (PORTICO_PLATFORM_KEY_FILE): ${garbage} holds no unencrypted PEM private key (-----BEGIN PRIVATE KEY-----)`,
  ]);
  t.strictSame(problems(t, pairEnv(key, cert)), [
    `platform.certFile (PORTICO_PLATFORM_CERT_FILE): ${key} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`,
    `platform.keyFile (PORTICO_PLATFORM_KEY_FILE): ${cert} holds no unencrypted PEM private key (-----BEGIN PRIVATE KEY-----)`,
  ], 'swapped');
  t.strictSame(problems(t, pairEnv(cert, file('other.key', other.key))), [
    `platform.certFile (PORTICO_PLATFORM_CERT_FILE) and platform.keyFile (PORTICO_PLATFORM_KEY_FILE): the key in ${path.join(dir, 'other.key')} does not belong to the certificate in ${cert}`,
  ]);
  t.strictSame(problems(t, pairEnv(path.join(dir, 'missing.crt'), key)), [`platform.certFile (PORTICO_PLATFORM_CERT_FILE): cannot read ${path.join(dir, 'missing.crt')} (ENOENT)`]);
});

t.test('issue: a data or certs dir that is a file failed with EEXIST / ENOTDIR', async (t) => {
  const dir = tempDir('dirs');
  t.teardown(() => cleanup(dir));
  const file = path.join(dir, 'a-file');
  writeFileSync(file, 'x');
  mkdirSync(path.join(dir, 'existing'));
  t.strictSame(problems(t, { PORTICO_DATA_DIR: file, PORTICO_CERTS_DIR: path.join(file, 'certs') }), [
    `dataDir (PORTICO_DATA_DIR): ${file} is not a directory`,
    `certsDir (PORTICO_CERTS_DIR): ${path.join(file, 'certs')} cannot be created: ${file} is not a directory`,
  ]);
  const config = withEnv({ PORTICO_DATA_DIR: path.join(dir, 'existing'), PORTICO_CERTS_DIR: path.join(dir, 'new/certs') });
  t.equal(config.certsDir, path.join(dir, 'new/certs'), 'a dir that does not exist yet is fine: it is created at start');
});
