// Renewal with an injected clock: nothing happens before the last third of the lifetime; inside it
// the certificate is replaced (a real order against pebble) and the next handshake gets the new one.
import t from 'tap';
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startPebble } from '../helpers/pebble.ts';
import { tempDir } from '../helpers/portico.ts';
import { openEmbeddedStores } from '../../src/state/embedded.ts';
import { openFileCertStores } from '../../src/certs/file-store.ts';
import { createIssuing } from '../../src/certs/issuing.ts';
import { resolveIssuers } from '../../src/certs/issuers.ts';
import { openFileCaLimits } from '../../src/certs/ca-limits-file.ts';
import { openFileOrderQueue } from '../../src/certs/order-queue.ts';
import { systemResolver } from '../../src/domains/verifier.ts';
import { createCertificateManager, renewAt, backoffFor } from '../../src/certs/manager.ts';
import { createRouteTable } from '../../src/routing/route.ts';
import { loadRoutes } from '../../src/routing/sync.ts';
import { createMetrics } from '../../src/metrics.ts';
import { createLogger } from '../../src/log.ts';

t.test('renewal moment and backoff schedule (pure)', async (t) => {
  const notBefore = '2026-01-01T00:00:00.000Z';
  const notAfter = '2026-04-01T00:00:00.000Z'; // 90 days
  const lifetime = Date.parse(notAfter) - Date.parse(notBefore);
  t.equal(renewAt(notBefore, notAfter, () => 0), Date.parse(notAfter) - lifetime / 3, 'last third');
  t.equal(renewAt(notBefore, notAfter, () => 1), Date.parse(notAfter) - lifetime / 3 - lifetime / 30, 'jitter up to 1/30 earlier');
  t.same([1, 2, 3, 4, 9, 20].map((n) => backoffFor(n) / 60_000), [1, 2, 5, 10, 360, 360], 'about 1 m, 2 m, 5 m, 10 m … 6 h');
});

t.test('renews in the last third, with a real CA', async (t) => {
  const dns = await startChalltestsrv();
  t.teardown(() => dns.stop());
  // the HTTP-01 listener takes its port first, so pebble's own free ports cannot collide with it
  const answers = { get: async (_token: string): Promise<string | null> => null };
  const challenges = http.createServer(async (req, res) => {
    const answer = await answers.get((req.url ?? '').split('/').pop() ?? '');
    res.statusCode = answer ? 200 : 404;
    res.end(answer ?? '');
  });
  await new Promise<void>((r) => challenges.listen(0, '127.0.0.1', r));
  t.teardown(() => challenges.close());
  const pebble = await startPebble({ httpPort: (challenges.address() as { port: number }).port, dnsServer: dns.dnsServer });
  t.teardown(() => pebble.stop());
  await dns.addA('renew.example.com', ['127.0.0.1']);

  const dataDir = tempDir('renew-data');
  const stores = await openEmbeddedStores(dataDir);
  t.teardown(() => stores.close());
  const certs = openFileCertStores(tempDir('renew-certs'), pebble.directoryUrl);
  answers.get = (token) => certs.challenges.get(token);

  const now = { ms: Date.now() };
  await stores.accounts.create({ id: 'acc_1', plan: 'pro', createdAt: new Date().toISOString() });
  await stores.projects.create({ id: 'prj_1', accountId: 'acc_1', name: 'renew', upstream: 'http://127.0.0.1:9', createdAt: new Date().toISOString() });
  await stores.domains.create({ hostname: 'renew.example.com', projectId: 'prj_1', accountId: 'acc_1', primary: true, status: 'pending', apex: false, records: [], diagnostics: [], certificate: { status: 'none' }, createdAt: new Date().toISOString() });
  const domain = (await stores.domains.get('renew.example.com'))!;
  await stores.domains.update({ ...domain, status: 'verified' });
  const routes = createRouteTable(['api.localhost'], [], 'localhost');
  await loadRoutes(stores, routes);
  const metrics = createMetrics();
  const issuing = createIssuing({
    issuers: resolveIssuers([{ directory: pebble.directoryUrl }], [], {}),
    email: null,
    state: { limits: openFileCaLimits(dataDir), queue: openFileOrderQueue(dataDir), accountKeys: () => certs.accountKey },
    challenges: certs.challenges,
    resolver: systemResolver([dns.dnsServer]),
    ca: readFileSync(pebble.caCertFile, 'utf8'),
    metrics,
    now: () => now.ms,
  });
  const manager = createCertificateManager({ stores, certs, ...issuing, routes, platformDomain: 'localhost', platform: null, log: createLogger('silent'), metrics, now: () => now.ms, jitter: () => 0 });

  const first = await manager.obtain('renew.example.com', 'verified');
  t.ok(first, 'issued');
  const orders = pebble.orders();
  const start = Date.parse(first!.notBefore);
  const end = Date.parse(first!.notAfter);

  now.ms = start + (end - start) * 0.6;
  await manager.sweep();
  t.equal(pebble.orders(), orders, 'at 60 % of the lifetime: nothing to do');
  t.equal((await certs.certificates.get('renew.example.com'))!.certPem, first!.certPem);

  now.ms = start + (end - start) * 0.7;
  await manager.sweep();
  t.equal(pebble.orders(), orders + 1, 'at 70 %: renewed');
  const renewed = (await certs.certificates.get('renew.example.com'))!;
  t.not(renewed.certPem, first!.certPem, 'a new certificate is stored');
  t.equal((await stores.domains.get('renew.example.com'))!.certificate.status, 'issued');
  const context = await manager.secureContext('renew.example.com');
  t.ok(context, 'the next handshake gets a context for it');
});
