// DNS checks as Verify and the scheduler run them, on an injected clock: real DNS (challtestsrv, with
// edge.localhost and elsewhere.example.net answering), real embedded state and a real scheduler.
import type { Test } from 'tap';
import { openEmbeddedStores } from '../../src/state/embedded.ts';
import type { Domain } from '../../src/state/types.ts';
import { createScheduler } from '../../src/domains/scheduler.ts';
import { createDomainChecks } from '../../src/domains/rechecks.ts';
import { systemResolver, type Resolver } from '../../src/domains/verifier.ts';
import { createMetrics } from '../../src/metrics.ts';
import { createLogger } from '../../src/log.ts';
import { cleanup, tempDir } from './portico.ts';
import { startChalltestsrv } from './challtestsrv.ts';

export const MINUTE = 60_000;
export const DAY = 24 * 60 * MINUTE;

/**
 * `onVerified`: told of each domain a check verifies (the certificate side, in the product);
 * `resolver`: what the checks ask, given the real resolver of challtestsrv (to hold an answer back)
 */
export async function startChecksBed(t: Test, name: string, options: { onVerified?: (domain: Domain) => void; resolver?: (real: Resolver) => Resolver } = {}) {
  const dns = await startChalltestsrv();
  t.teardown(() => dns.stop());
  await dns.addA('edge.localhost', ['127.0.0.1']);
  await dns.addA('elsewhere.example.net', ['192.0.2.10']);
  const dataDir = tempDir(name);
  t.teardown(() => cleanup(dataDir));
  const stores = await openEmbeddedStores(dataDir);
  t.teardown(() => stores.close());
  const clock = { ms: Date.parse('2026-03-01T10:00:00Z') };
  const now = () => clock.ms;
  const scheduler = createScheduler({ store: stores.schedule, log: createLogger('silent'), now });
  const real = systemResolver([dns.dnsServer]);
  const resolver = options.resolver ? options.resolver(real) : real;
  const checks = createDomainChecks({
    stores,
    scheduler,
    metrics: createMetrics(),
    log: createLogger('silent'),
    now,
    onVerified: options.onVerified,
    context: () => ({ pendingRecheckMs: MINUTE, verifiedRecheckMs: DAY, cnameTarget: 'edge.localhost', caaIdentities: ['letsencrypt.org'], resolver }),
  });
  return { dns, stores, clock, now, scheduler, checks };
}
