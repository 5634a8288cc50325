// `portico serve` with settings that used to pass the configuration and then failed later, with exit 1
// and raw Node or OpenSSL text (or not at all): now each stops the start with exit 2 and one message
// naming the variable. Regression tests for a tester's findings, on a real process.
import t from 'tap';
import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { baseEnv, cleanup, tempDir } from '../helpers/portico.ts';
import { UNPARSEABLE_WITH_SECRETS } from '../helpers/redis-url-secrets.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');

interface Outcome {
  code: number | null;
  output: string;
}

/** `portico serve` with `env`; its exit code and everything it wrote (stdout and stderr). */
async function serve(env: Record<string, string>, options: { uid?: number; gid?: number } = {}): Promise<Outcome> {
  const command = [process.execPath, path.join(ROOT, 'src/cli/main.ts'), 'serve'];
  // tap puts its hooks into every child's NODE_OPTIONS, and they write into the checkout, which
  // another user may not: `env -u` takes them out after tap has added them
  if (options.uid !== undefined) command.unshift('/usr/bin/env', '-u', 'NODE_OPTIONS');
  const child = spawn(command[0], command.slice(1), { env: { ...process.env, ...baseEnv(env) }, stdio: ['ignore', 'pipe', 'pipe'], ...options });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));
  clearTimeout(timer);
  return { code, output };
}

const dirs: string[] = [];
function dir(prefix: string): string {
  const made = tempDir(prefix);
  dirs.push(made);
  return made;
}
t.teardown(() => cleanup(...dirs));

/** a data and a certs dir of its own, so no run leaves files behind */
const own = () => ({ PORTICO_DATA_DIR: dir('data'), PORTICO_CERTS_DIR: dir('certs') });

t.test('issue: an unparseable PORTICO_REDIS_URL showed its password; now exit 2 and no secret anywhere', async (t) => {
  const forms = UNPARSEABLE_WITH_SECRETS;
  const outcomes = await Promise.all(forms.map(([url]) => serve({ ...own(), PORTICO_REDIS_URL: url })));
  forms.forEach(([url, secrets], i) => {
    const { code, output } = outcomes[i];
    t.equal(code, 2, `exit 2 for form ${i + 1}`);
    t.match(output, /redis\.url \(PORTICO_REDIS_URL\)/, 'the message names the variable');
    t.match(output, /\*\*\*@127\.0\.0\.1:26399/, 'and shows the URL with its credentials hidden');
    for (const secret of secrets) t.notOk(output.includes(secret), `form ${i + 1} (${url.length} characters): ${JSON.stringify(secret)} appears nowhere`);
  });
});

t.test('issue: settings that failed after the configuration now stop it, with exit 2', async (t) => {
  const file = path.join(dir('files'), 'a-file');
  writeFileSync(file, 'not a directory');
  const empty = path.join(path.dirname(file), 'empty.pem');
  writeFileSync(empty, '');
  const garbage = path.join(path.dirname(file), 'garbage.pem');
  writeFileSync(garbage, '-----BEGIN CERTIFICATE-----\nMIIBnonsense\n-----END CERTIFICATE-----\n');
  const cases: Array<[string, Record<string, string>, RegExp[]]> = [
    ['DNS server not an address', { PORTICO_DNS_SERVERS: 'abc' }, [/dns\.servers \(PORTICO_DNS_SERVERS\): "abc" is not an IP address/]],
    ['DNS server a name', { PORTICO_DNS_SERVERS: 'dns.google:53' }, [/PORTICO_DNS_SERVERS\): "dns\.google:53" is not an IP address/]],
    ['DNS server port', { PORTICO_DNS_SERVERS: '1.1.1.1:99999' }, [/PORTICO_DNS_SERVERS\): "1\.1\.1\.1:99999" has a port outside 1–65535/]],
    ['admin host a name', { PORTICO_ADMIN_HOST: 'abc' }, [/admin\.host \(PORTICO_ADMIN_HOST\) must be an IP address/]],
    ['public port 0', { PORTICO_PUBLIC_HTTPS_PORT: '0' }, [/https\.publicPort \(PORTICO_PUBLIC_HTTPS_PORT\) must be a port number 1–65535, got 0/]],
    ['API hosts', { PORTICO_API_HOSTS: 'https://api.example.com,*.example.com', PORTICO_STAGING_API_HOSTS: 'bad host' }, [/api\.hosts \(PORTICO_API_HOSTS\) must list hostnames/, /api\.stagingHosts \(PORTICO_STAGING_API_HOSTS\) must list hostnames/]],
    ['API host in both lists', { PORTICO_API_HOSTS: 'api.localhost', PORTICO_STAGING_API_HOSTS: 'api.localhost' }, [/PORTICO_API_HOSTS\) and api\.stagingHosts \(PORTICO_STAGING_API_HOSTS\) both list "api\.localhost"/]],
    ['empty platform certificate', { PORTICO_PLATFORM_CERT_FILE: empty, PORTICO_PLATFORM_KEY_FILE: empty }, [/PORTICO_PLATFORM_CERT_FILE\): \S+empty\.pem is empty/, /PORTICO_PLATFORM_KEY_FILE\): \S+empty\.pem is empty/]],
    ['garbage platform certificate', { PORTICO_PLATFORM_CERT_FILE: garbage, PORTICO_PLATFORM_KEY_FILE: garbage }, [/PORTICO_PLATFORM_CERT_FILE\): \S+garbage\.pem holds no PEM certificate/, /PORTICO_PLATFORM_KEY_FILE\): \S+garbage\.pem holds no unencrypted PEM private key/]],
    ['data dir a file', { PORTICO_DATA_DIR: file }, [/dataDir \(PORTICO_DATA_DIR\): \S+a-file is not a directory/]],
    ['certs dir a file', { PORTICO_CERTS_DIR: file }, [/certsDir \(PORTICO_CERTS_DIR\): \S+a-file is not a directory/]],
    ['proxy protocol', { PORTICO_PROXY_PROTOCOL: 'maybe' }, [/proxyProtocol \(PORTICO_PROXY_PROTOCOL\) must be true\/on\/yes\/1 or false\/off\/no\/0, got "maybe"/]],
  ];
  const outcomes = await Promise.all(cases.map(([, env]) => serve({ ...own(), ...env })));
  cases.forEach(([name, , expected], i) => {
    const { code, output } = outcomes[i];
    t.equal(code, 2, `${name}: exit 2 (output: ${output.trim()})`);
    t.match(output, /^invalid configuration:\n/, `${name}: the configuration report`);
    for (const pattern of expected) t.match(output, pattern, `${name}: ${pattern}`);
    t.notMatch(output, /EEXIST|ENOTDIR|ENOTFOUND|ERR_|routines::|setServers/, `${name}: no raw Node or OpenSSL text`);
  });
});

t.test('issue: unwritable data and certs dirs failed with a raw EACCES', async (t) => {
  const base = dir('unwritable');
  chmodSync(base, 0o755);
  const dataDir = path.join(base, 'data');
  const parent = path.join(base, 'locked');
  mkdirSync(dataDir, { mode: 0o555 });
  mkdirSync(parent, { mode: 0o555 });
  const certsDir = path.join(parent, 'certs');
  // root may write anywhere: run Portico as nobody there
  const asRoot = process.getuid?.() === 0;
  const { code, output } = await serve({ PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir }, asRoot ? { uid: 65534, gid: 65534 } : {});
  t.equal(code, 2, output);
  t.match(output, `dataDir (PORTICO_DATA_DIR): ${dataDir} is not writable by this process`);
  t.match(output, `certsDir (PORTICO_CERTS_DIR): ${certsDir} cannot be created: ${parent} is not writable by this process`);
  t.notMatch(output, /EACCES/);
});
