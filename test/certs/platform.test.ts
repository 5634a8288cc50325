// Default hostnames (<name>.<platform domain>) are served with the operator's wildcard certificate,
// and a reload picks up a renewed one without a restart.
import t from 'tap';
import tls from 'node:tls';
import path from 'node:path';
import { writeFileSync } from 'node:fs';
import { selfSigned } from '../../src/certs/fallback.ts';
import { startPortico, tempDir } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';

function serial(port: number, servername: string, ca: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, servername, ca, ALPNProtocols: ['http/1.1'] }, () => {
      resolve(socket.getPeerX509Certificate()!.serialNumber);
      socket.end();
    });
    socket.on('error', reject);
  });
}

t.test('the platform certificate answers for project default hostnames', async (t) => {
  const dir = tempDir('platform');
  const certFile = path.join(dir, 'wildcard.crt');
  const keyFile = path.join(dir, 'wildcard.key');
  const first = await selfSigned(['*.platform.test'], 30);
  writeFileSync(certFile, first.cert);
  writeFileSync(keyFile, first.key);
  const portico = await startPortico({ PORTICO_PLATFORM_DOMAIN: 'platform.test', PORTICO_PLATFORM_CERT_FILE: certFile, PORTICO_PLATFORM_KEY_FILE: keyFile });
  t.teardown(() => portico.stop());
  const account = (await admin(portico.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const project = (await admin(portico.ports.admin, 'POST', '/admin/projects', { accountId: account.id, name: 'shop', upstream: 'http://127.0.0.1:9' })).json;
  t.equal(project.defaultDomain, 'shop.platform.test');

  const before = await serial(portico.ports.https, 'shop.platform.test', first.cert);
  t.ok(before, 'verifies against the wildcard certificate, by name');
  await t.rejects(serial(portico.ports.https, 'nobody.platform.test', first.cert), 'a name that is not a project gets the fallback');

  const renewed = await selfSigned(['*.platform.test'], 30);
  writeFileSync(certFile, renewed.cert);
  writeFileSync(keyFile, renewed.key);
  await portico.running.reload();
  const after = await serial(portico.ports.https, 'shop.platform.test', renewed.cert);
  t.not(after, before, 'after a reload the renewed certificate is served');
});
