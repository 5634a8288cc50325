// The certificate manager in this process against a real pebble, with an injected clock: embedded
// stores, a plain HTTP server answering HTTP-01 from the challenge store on pebble's validation
// port, and challtestsrv pointing each added hostname at it. For tests of timing (queue refills,
// renewal windows) that cannot wait for real hours.
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { startChalltestsrv, type Challtestsrv } from './challtestsrv.ts';
import { startPebble, type Pebble, type PebbleOptions } from './pebble.ts';
import { tempDir } from './portico.ts';
import { openEmbeddedStores } from '../../src/state/embedded.ts';
import { openFileCertStores } from '../../src/certs/file-store.ts';
import { createIssuing } from '../../src/certs/issuing.ts';
import { resolveIssuers, type CaLimits, type IssuerInput } from '../../src/certs/issuers.ts';
import { openFileCaLimits } from '../../src/certs/ca-limits-file.ts';
import { openFileOrderQueue } from '../../src/certs/order-queue.ts';
import { createCertificateManager, type CertificateManager } from '../../src/certs/manager.ts';
import { systemResolver } from '../../src/domains/verifier.ts';
import { createRouteTable } from '../../src/routing/route.ts';
import { loadRoutes } from '../../src/routing/sync.ts';
import { createMetrics, type Metrics } from '../../src/metrics.ts';
import { createLogger } from '../../src/log.ts';
import type { Stores } from '../../src/state/types.ts';
import type { CertStores } from '../../src/certs/types.ts';

export interface ManagerBed {
  manager: CertificateManager;
  stores: Stores;
  certs: CertStores;
  pebble: Pebble;
  dns: Challtestsrv;
  metrics: Metrics;
  clock: { ms: number };
  /** a verified domain of the test project (its DNS points at the challenge server) */
  addVerified(hostname: string): Promise<void>;
  /** a second manager on the same stores, certificate stores and CA state: another instance */
  another(): CertificateManager;
  stop(): Promise<void>;
}

export async function startManagerBed(options: {
  limits?: Partial<CaLimits>;
  pebble?: Partial<PebbleOptions>;
  issuer?: Partial<IssuerInput>;
  /** the directory URL Portico is given, when not pebble's own (a server in front of it) */
  directory?(pebble: Pebble): Promise<string>;
  /** the challenge server answers the CA's validation this much later (a slow order) */
  challengeDelayMs?: number;
  /** the managers' order lock TTL */
  lockTtlMs?: number;
} = {}): Promise<ManagerBed> {
  const dns = await startChalltestsrv();
  // the HTTP-01 listener takes its port first, so pebble's own free ports cannot collide with it
  let certs: CertStores | null = null;
  const challenges = http.createServer(async (req, res) => {
    if (options.challengeDelayMs) await new Promise((r) => setTimeout(r, options.challengeDelayMs));
    const answer = await certs?.challenges.get((req.url ?? '').split('/').pop() ?? '');
    res.statusCode = answer ? 200 : 404;
    res.end(answer ?? '');
  });
  await new Promise<void>((r) => challenges.listen(0, '127.0.0.1', r));
  const httpPort = (challenges.address() as { port: number }).port;
  const pebble = await startPebble({ httpPort, dnsServer: dns.dnsServer, ...options.pebble });
  const dataDir = tempDir('bed-data');
  const stores = await openEmbeddedStores(dataDir);
  certs = openFileCertStores(tempDir('bed-certs'), pebble.directoryUrl);
  const clock = { ms: Date.now() };
  const now = () => clock.ms;
  await stores.accounts.create({ id: 'acc_1', plan: 'pro', createdAt: new Date().toISOString() });
  await stores.projects.create({ id: 'prj_1', accountId: 'acc_1', name: 'bed', upstream: 'http://127.0.0.1:9', createdAt: new Date().toISOString() });
  const routes = createRouteTable(['api.localhost'], [], 'localhost');
  const metrics = createMetrics();
  const issuing = createIssuing({
    issuers: resolveIssuers([{ directory: options.directory ? await options.directory(pebble) : pebble.directoryUrl, ...options.issuer }], [], options.limits ?? {}),
    email: null,
    state: { limits: openFileCaLimits(dataDir), queue: openFileOrderQueue(dataDir), accountKeys: () => certs.accountKey },
    challenges: certs.challenges,
    resolver: systemResolver([dns.dnsServer]),
    ca: readFileSync(pebble.caCertFile, 'utf8'),
    metrics,
    now,
  });
  const managerOf = () => createCertificateManager({
    stores, certs, ...issuing,
    routes, platformDomain: 'localhost', platform: null, log: createLogger('silent'), metrics, now, jitter: () => 0,
    ...(options.lockTtlMs ? { lockTtlMs: options.lockTtlMs } : {}),
  });
  const manager = managerOf();
  const others: CertificateManager[] = [];
  return {
    manager, stores, certs, pebble, dns, metrics, clock,
    async addVerified(hostname) {
      await dns.addA(hostname, ['127.0.0.1']);
      const at = new Date(clock.ms).toISOString();
      await stores.domains.create({ hostname, projectId: 'prj_1', accountId: 'acc_1', primary: false, status: 'pending', apex: false, records: [], diagnostics: [], certificate: { status: 'none' }, createdAt: at });
      const domain = (await stores.domains.get(hostname))!;
      await stores.domains.update({ ...domain, status: 'verified', verifiedAt: at });
      await loadRoutes(stores, routes);
    },
    another() {
      const other = managerOf();
      others.push(other);
      return other;
    },
    async stop() {
      manager.stop();
      for (const other of others) other.stop();
      await new Promise((r) => challenges.close(r));
      await stores.close();
      await pebble.stop();
      await dns.stop();
    },
  };
}
