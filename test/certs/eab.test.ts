// External Account Binding (RFC 8555 §7.3.4), as ZeroSSL and Google Trust Services want it: a pebble
// that requires it issues to Portico with the issuer's `eab` from acme.issuers, and refuses the same
// directory without it.
import t from 'tap';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { startPortico, tempDir, type Instance } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startPebble } from '../helpers/pebble.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { freePort } from '../helpers/free-port.ts';
import { admin } from '../helpers/client.ts';

const dns = await startChalltestsrv();
t.teardown(() => dns.stop());
const upstream = await startUpstream();
t.teardown(() => upstream.stop());
const httpPort = await freePort();
const hmacKey = randomBytes(32).toString('base64url');
const pebble = await startPebble({ httpPort, dnsServer: dns.dnsServer, externalAccountMACKeys: { 'kid-portico': hmacKey } });
t.teardown(() => pebble.stop());
await dns.addA('edge.localhost', ['127.0.0.1']);
const dir = tempDir('eab');
const base = readFileSync(path.resolve(import.meta.dirname, '../../config/portico.yaml'), 'utf8');

async function certificateFor(instance: Instance, hostname: string) {
  const account = (await admin(instance.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const project = (await admin(instance.ports.admin, 'POST', '/admin/projects', { accountId: account.id, name: hostname.split('.')[0], upstream: upstream.url })).json;
  await admin(instance.ports.admin, 'POST', `/admin/projects/${project.id}/domains`, { hostname });
  await dns.setCname(hostname, 'edge.localhost');
  await admin(instance.ports.admin, 'POST', `/admin/projects/${project.id}/domains/${hostname}/verify`);
  const deadline = Date.now() + 15_000;
  for (;;) {
    const certificate = (await admin(instance.ports.admin, 'GET', `/admin/projects/${project.id}/domains/${hostname}`)).json.certificate;
    if (certificate.status === 'issued' || certificate.status === 'failed') return certificate;
    if (Date.now() > deadline) throw new Error(JSON.stringify(certificate));
    await new Promise((r) => setTimeout(r, 100));
  }
}

const env = { PORTICO_HTTP_PORT: String(httpPort), PORTICO_DNS_SERVERS: dns.dnsServer, PORTICO_ACME_DIRECTORY: pebble.directoryUrl, NODE_EXTRA_CA_CERTS: pebble.caCertFile };

t.test('with the issuer\'s EAB the CA issues', async (t) => {
  const configFile = path.join(dir, 'with-eab.yaml');
  writeFileSync(configFile, base.replace(/^ {2}issuers: null$/m, `  issuers: [{directory: "${pebble.directoryUrl}", eab: {kid: kid-portico, hmacKey: "${hmacKey}"}}]`));
  const portico = await startPortico({ ...env, PORTICO_CONFIG: configFile });
  t.teardown(() => portico.stop());
  t.match(await certificateFor(portico, 'bound.example.com'), { status: 'issued' });
});

t.test('without it the same CA refuses, and the domain says why', async (t) => {
  const portico = await startPortico(env);
  t.teardown(() => portico.stop());
  const certificate = await certificateFor(portico, 'unbound.example.com');
  t.equal(certificate.status, 'failed');
  t.match(certificate.lastError, /externalAccountBinding/);
});
