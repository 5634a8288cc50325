// DNS checks of a domain, on request (Verify, Re-verify) and by themselves: the `domain-check` job of
// the scheduler (scheduler.ts), one per domain, due at the domain's `nextCheckAt`. checks.ts decides
// what a check's findings do; this file runs the check, stores the outcome with its events in one
// write, schedules the next one and starts the certificate when the domain has just verified.
import { createHash } from 'node:crypto';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { Domain, Stores } from '../state/types.ts';
import type { ScheduledJob } from '../state/schedule.ts';
import { applyCheck, checkResult, checksStopped, type CheckReason, type CheckSettings } from './checks.ts';
import type { Scheduler } from './scheduler.ts';
import type { AccountUris } from './caa.ts';
import { verifyDomain, type Resolver, type Verification } from './verifier.ts';
import type { ProjectTurns } from './project-turns.ts';
import { sameDomain } from './same-domain.ts';

export const DOMAIN_CHECK = 'domain-check';
const SEEDED = 'domain-checks-seeded';

export interface CheckContext extends CheckSettings {
  cnameTarget: string;
  caaIdentities: readonly string[];
  /** Portico's ACME account URIs, for CAA `accounturi`; without them such a record does not count (caa.ts) */
  accountUris?: AccountUris;
  resolver: Resolver;
}

export interface DomainChecksDeps {
  stores: Stores;
  scheduler: Scheduler;
  /** read at each check, so a reload's resolvers and intervals apply to the next one */
  context(): CheckContext;
  metrics: Metrics;
  log: Logger;
  /** the project's turn a check takes to store what it found, after its DNS lookup (project-turns.ts) */
  turns?: ProjectTurns;
  /** a domain just verified (or asked to try again): certificates plug in here */
  onVerified?(domain: Domain, reason: 'verify' | 'reverify'): void;
  now?: () => number;
}

export function createDomainChecks(deps: DomainChecksDeps) {
  const { stores, scheduler, metrics, log } = deps;
  const now = deps.now ?? Date.now;

  /**
   * Checks DNS now and stores what it found (diagnostics, status, health, the next check) with the
   * events describing it. Null when the domain was removed meanwhile.
   */
  async function run(domain: Domain, reason: CheckReason, { schedule = true } = {}): Promise<Domain | null> {
    const context = deps.context();
    // the ownership TXT proves a claim once, at the first verification; after it only DNS pointing at
    // the platform (and CAA) is checked, so removing the TXT later does not make the domain misconfigured
    const ownershipToken = domain.verifiedAt === undefined ? domain.ownershipToken : undefined;
    const result = await verifyDomain(
      { hostname: domain.hostname, apex: domain.apex, cnameTarget: context.cnameTarget, caaIdentities: context.caaIdentities, accountUris: context.accountUris, ownershipToken },
      context.resolver,
    );
    metrics.domainChecks.inc({ result: checkResult(result) });
    // re-read after the slow step (DNS), in the project's turn (project-turns.ts), so an owner's change
    // made meanwhile is not written over and no second primary is made beside one just chosen; the DNS
    // lookup stays outside it, or a resolver that never answers (~7 s) would hold every change to the
    // project past what they wait for a turn
    const store = () => storeCheck(domain, result, reason, context);
    const stored = deps.turns ? await deps.turns(domain.projectId, store) : await store();
    if (stored === null) return null;
    const { current, saved, outcome } = stored;
    if (schedule) {
      if (outcome.nextCheckAt === null) await scheduler.cancel(DOMAIN_CHECK, domain.hostname);
      else await scheduler.at(DOMAIN_CHECK, domain.hostname, outcome.nextCheckAt);
    }
    // An automatic check also starts the order of a verified domain that has no certificate and none
    // on its way: an order cut short (its instance killed mid-order leaves `pending`, with nothing
    // scheduled) or one that could not start (the state unavailable just then). Until now only a
    // visitor's handshake ordered again. A failed or queued certificate has its own retry.
    const unsettled = saved.certificate.status === 'none' || saved.certificate.status === 'pending';
    if (saved.status === 'verified' && (reason !== 'recheck' || outcome.verifiedNow || unsettled)) deps.onVerified?.(saved, reason === 'reverify' ? 'reverify' : 'verify');
    if (outcome.verifiedNow && reason === 'recheck') log.info({ hostname: domain.hostname }, 'domain verified by an automatic check');
    return saved;
  }

  async function storeCheck(domain: Domain, result: Verification, reason: CheckReason, context: CheckContext) {
    const current = await stores.domains.get(domain.hostname);
    // removed meanwhile, maybe added back: what this check found (with the old one's ownership token)
    // is not the new domain's, which gets its own check
    if (!sameDomain(domain, current)) return null;
    const outcome = applyCheck(current, result, reason, context, now());
    // the first verified domain of a project becomes primary: looked at when one verifies or the owner
    // asks, not on every daily check (that would read every domain of the project each time)
    if ((outcome.verifiedNow || reason !== 'recheck') && outcome.domain.status === 'verified' && !outcome.domain.redirect && !outcome.domain.primary) {
      const siblings = await stores.domains.listByProject(domain.projectId);
      if (!siblings.some((d) => d.primary && d.hostname !== domain.hostname)) outcome.domain.primary = true;
    }
    const saved = await stores.domains.update(outcome.domain, outcome.events);
    if (!saved) return null;
    // a notice makes every instance re-read the route and drop the cached certificate context: only
    // when serving changes, not for each routine check
    if (saved.status !== current.status || saved.primary !== current.primary) await stores.events.publish(`domain:${domain.hostname}`);
    return { current, saved, outcome };
  }

  /** the scheduled check: skips a due time the domain no longer holds (at-least-once delivery) */
  async function onJob(job: ScheduledJob): Promise<number | null> {
    const domain = await stores.domains.get(job.key);
    if (!domain || checksStopped(domain)) return null;
    const due = domain.nextCheckAt ? Date.parse(domain.nextCheckAt) : job.dueAt;
    if (due > now() + 1000) return due;
    const saved = await run(domain, 'recheck', { schedule: false });
    return saved?.nextCheckAt ? Date.parse(saved.nextCheckAt) : null;
  }

  scheduler.register(DOMAIN_CHECK, onJob);

  return {
    run,
    /** the first automatic check of a domain just added (its `nextCheckAt`) */
    async scheduleFirst(domain: Domain): Promise<void> {
      if (domain.nextCheckAt) await scheduler.at(DOMAIN_CHECK, domain.hostname, Date.parse(domain.nextCheckAt));
    },
    /**
     * A removed domain's automatic checks stop. The job is cancelled after the record went, so when the
     * name was added back in between (two requests, two instances) the new domain's first check, already
     * scheduled under the same name, went with it: it is set again from the new record.
     */
    async forget(hostname: string): Promise<void> {
      await scheduler.cancel(DOMAIN_CHECK, hostname);
      const current = await stores.domains.get(hostname);
      if (current?.nextCheckAt && !checksStopped(current)) await scheduler.at(DOMAIN_CHECK, hostname, Date.parse(current.nextCheckAt));
    },
    /**
     * Once per state backend: domains stored before automatic checks existed (no nextCheckAt) get
     * their first check — pending and failed ones within one pending interval, verified ones spread
     * over one verified interval by a hash of the hostname, so they do not all come due at once.
     * In the background; nothing is read on later starts. A verified domain is scheduled from the
     * index alone (100k stored domains cost 19–25 s of CPU when each record was read). One verified
     * in the moments before this ran has a due time of its own: its job now comes up at the spread
     * time instead, and onJob then checks it or moves it to its own time. Pending and failed ones
     * are read, since whether their checks stopped is in the record.
     */
    async seed(): Promise<number> {
      if (await stores.schedule.marked(SEEDED)) return 0;
      const { pendingRecheckMs, verifiedRecheckMs } = deps.context();
      const jobs: ScheduledJob[] = [];
      const schedule = (hostname: string, interval: number) => jobs.push({ kind: DOMAIN_CHECK, key: hostname, dueAt: now() + spread(hostname) * interval });
      for (const project of await stores.projects.list()) {
        for (const { hostname, status } of await stores.domains.statusesByProject(project.id)) {
          if (status === 'verified') {
            schedule(hostname, verifiedRecheckMs);
            continue;
          }
          const d = await stores.domains.get(hostname);
          if (d && !d.nextCheckAt && !checksStopped(d)) schedule(hostname, d.status === 'verified' ? verifiedRecheckMs : pendingRecheckMs);
        }
        // let requests in between projects
        await new Promise((resolve) => setImmediate(resolve));
      }
      // one write for all: one append per hour file they fall in, not one per project and hour
      await stores.schedule.setMany(jobs);
      await stores.schedule.mark(SEEDED);
      if (jobs.length > 0) log.info({ domains: jobs.length }, 'scheduled the first automatic DNS check of domains stored before automatic checks existed');
      return jobs.length;
    },
  };
}

export type DomainChecks = ReturnType<typeof createDomainChecks>;

/** a fixed fraction in [0, 1) per hostname */
function spread(hostname: string): number {
  return createHash('sha256').update(hostname).digest().readUInt32BE(0) / 2 ** 32;
}
