// The SNI cache bounds memory, not only entries: a SecureContext the LRU drops is closed on the next
// turn of the event loop (its OpenSSL state is invisible to V8 and would otherwise wait for an
// unrelated full collection), a connection that installed it before keeps working, and handshakes
// racing the evictions never get a closed one. Real TLS connections, real stores on disk.
import t, { type Test } from 'tap';
import tls from 'node:tls';
import { once } from 'node:events';
import { X509Certificate } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { selfSigned } from '../../src/certs/fallback.ts';
import { openFileCertStores } from '../../src/certs/file-store.ts';
import { openFileOrderQueue } from '../../src/certs/order-queue.ts';
import { createCertificateManager } from '../../src/certs/manager.ts';
import { openEmbeddedStores } from '../../src/state/embedded.ts';
import { createRouteTable } from '../../src/routing/route.ts';
import { loadRoutes } from '../../src/routing/sync.ts';
import { createMetrics } from '../../src/metrics.ts';
import { createLogger } from '../../src/log.ts';
import { createOcspStapler } from '../../src/certs/ocsp.ts';
import { cleanup, tempDir } from '../helpers/portico.ts';

const HOSTNAMES = ['one.example.com', 'two.example.com', 'three.example.com'];
const nextTurn = () => new Promise((r) => setImmediate(r));

async function serve(t: Test) {
  const dataDir = tempDir('sni-data');
  const certsDir = tempDir('sni-certs');
  t.teardown(() => cleanup(dataDir, certsDir));
  const stores = await openEmbeddedStores(dataDir);
  t.teardown(() => stores.close());
  const certs = openFileCertStores(certsDir, 'https://ca.test/directory');
  const pair = await selfSigned(HOSTNAMES, 30);
  const leaf = new X509Certificate(pair.cert);
  for (const hostname of HOSTNAMES) {
    await stores.domains.create({ hostname, projectId: 'prj_1', accountId: 'acc_1', primary: false, status: 'verified', apex: false, records: [], diagnostics: [], certificate: { status: 'issued' }, createdAt: new Date().toISOString() });
    await certs.certificates.put({ hostname, certPem: pair.cert, keyPem: pair.key, notBefore: new Date(leaf.validFrom).toISOString(), notAfter: new Date(leaf.validTo).toISOString(), issuer: 'test' });
  }
  await stores.projects.create({ id: 'prj_1', accountId: 'acc_1', name: 'sni', upstream: 'http://127.0.0.1:9', createdAt: new Date().toISOString() });
  const routes = createRouteTable([], [], 'localhost');
  await loadRoutes(stores, routes);
  const chain = { issue: () => Promise.reject(new Error('no order expected')), directories: [] };
  const manager = createCertificateManager({ stores, certs, chain, queue: openFileOrderQueue(dataDir), routes, platformDomain: 'localhost', platform: null, log: createLogger('silent'), metrics: createMetrics(), cacheSize: 2 });

  // an echo server whose certificate comes from the manager, as the HTTPS listener's does
  const fallback = await selfSigned(['localhost'], 30);
  const server = tls.createServer({ ...fallback, SNICallback: (name, done) => void manager.secureContext(name).then((c) => done(null, c ?? undefined), done) }, (socket) => socket.pipe(socket));
  // as on the HTTPS listener: a client asking for a staple makes Node read the installed context again
  server.on('OCSPRequest', createOcspStapler().onRequest);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => server.close());
  const { port } = server.address() as AddressInfo;
  return { manager, pair, port };

}

t.test('a context dropped from the SNI cache is closed; a connection that uses it keeps working', async (t) => {
  const { manager, pair, port } = await serve(t);
  const first = await manager.secureContext(HOSTNAMES[0]);
  t.ok(first, 'a context for the first name');
  const socket = tls.connect({ host: '127.0.0.1', port, servername: HOSTNAMES[0], ca: pair.cert });
  await once(socket, 'secureConnect');
  t.teardown(() => socket.destroy());

  await manager.secureContext(HOSTNAMES[1]);
  await manager.secureContext(HOSTNAMES[2]); // the first name leaves the cache (2 entries)
  t.equal(manager.cacheSize(), 2);
  t.ok(first!.context.getCertificate(), 'not closed within the turn: a handshake may be about to install it');
  await nextTurn();
  t.equal(first!.context.getCertificate(), null, 'closed on the next turn of the event loop');
  t.ok((await manager.secureContext(HOSTNAMES[2]))!.context.getCertificate(), 'what the cache holds stays open');

  socket.write('still here');
  const [echo] = await once(socket, 'data');
  t.equal(String(echo), 'still here', 'the connection that installed the closed context still works');

  const again = tls.connect({ host: '127.0.0.1', port, servername: HOSTNAMES[0], ca: pair.cert });
  await once(again, 'secureConnect');
  t.ok(again.authorized, 'a new connection to the dropped name gets a fresh context');
  again.destroy();
});

t.test('handshakes racing evictions of their names are served the right certificate, never a closed context', async (t) => {
  const { manager, pair, port } = await serve(t);
  // three names through a cache of two: nearly every cold handshake evicts a context another
  // handshake was handed in the same turn; a closed one installed would abort the process
  const handshake = (i: number) => new Promise<boolean>((resolve) => {
    const socket = tls.connect({ host: '127.0.0.1', port, servername: HOSTNAMES[i % HOSTNAMES.length], ca: pair.cert, requestOCSP: i % 2 === 0 });
    socket.once('secureConnect', () => {
      resolve(socket.authorized);
      socket.destroy();
    });
    socket.once('error', () => resolve(false));
  });
  const results = await Promise.all(Array.from({ length: 300 }, (_, i) => handshake(i)));
  t.equal(results.filter(Boolean).length, 300, 'all 300 parallel handshakes verified against the stored certificate');
  t.equal(manager.cacheSize(), 2, 'the cache stayed at its bound');
});
