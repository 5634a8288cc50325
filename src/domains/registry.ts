// The owner's workflow for custom domains: add → DNS records → verify (diagnostics; also automatic,
// rechecks.ts) → primary, redirects → remove. Every change publishes a notice so every instance's
// route table follows at once, and every step is an event on the domain's timeline (events.ts).
import { randomBytes } from 'node:crypto';
import type { Config } from '../config.ts';
import { HttpError } from '../errors.ts';
import type { Domain, DomainHealth, DomainStatus, Project, RedirectStatus, Stores } from '../state/types.ts';
import net from 'node:net';
import { dnsRecords, storedHostname, validateDomainHostname, validateHostname } from './hostname-rules.ts';
import { domainEvent, type DomainEvent } from './events.ts';
import type { ProjectTurns } from './project-turns.ts';
import type { DomainChecks } from './rechecks.ts';

const TAKEOVER_WINDOW_MS = 30 * 86_400_000;
const REDIRECT_STATUSES: readonly RedirectStatus[] = [301, 302, 307, 308];
const DOMAIN_STATUSES: readonly DomainStatus[] = ['pending', 'verified', 'failed'];
const HEALTHS: readonly DomainHealth[] = ['ok', 'misconfigured'];

export interface DomainRegistryDeps {
  config: Config;
  stores: Stores;
  /** DNS checks on request and by themselves (they start certificates once a domain verifies) */
  checks: DomainChecks;
  /** where changes to one project's domains take turns, across instances too (project-turns.ts) */
  turns: ProjectTurns;
  /** a domain was removed: its certificate goes too */
  onRemoved?(hostname: string): Promise<void>;
}

/** What the admin API shows of a domain: internal fields stay inside. */
export function domainView(domain: Domain) {
  const { accountId: _account, apex: _apex, ownershipToken: _token, recheck: _recheck, redirect, certificate, health, ...view } = domain;
  const { failures: _failures, renewalPausedAt: _paused, ...certificateView } = certificate;
  const shown = { ...view, health: health ?? 'ok', certificate: certificateView };
  return redirect ? { ...shown, redirect } : shown;
}

export function createDomainRegistry(deps: DomainRegistryDeps) {
  const { config, stores } = deps;
  const rules = { platformDomain: config.platform.domain, apiHosts: [...config.api.hosts, ...config.api.stagingHosts], cnameTarget: config.platform.cnameTarget };

  const changed = (hostname: string) => stores.events.publish(`domain:${hostname}`);

  // The owner's changes take turns per project, in this process and across instances: each reads the
  // domain and its siblings, decides and writes, so two at once would both pass their checks (a double
  // click removed one redirect twice; A→B and B→A made a loop; two domains became primary). The second
  // now sees the first's result. Adding a domain touches no other and needs no turn.
  const oneAtATime = <T>(project: Project, run: () => Promise<T>): Promise<T> => deps.turns(project.id, run);

  async function domainOf(project: Project, hostname: string): Promise<Domain> {
    const domain = await stores.domains.get(storedHostname(hostname));
    if (!domain || domain.projectId !== project.id) throw new HttpError('not_found', `${hostname} is not a domain of project ${project.name}.`);
    return domain;
  }

  /** Re-reads the domain after a slow step (DNS) so concurrent changes are not overwritten. */
  async function save(domain: Domain): Promise<Domain> {
    const saved = await stores.domains.update(domain);
    if (!saved) throw new HttpError('not_found', `${domain.hostname} was removed meanwhile.`);
    await changed(domain.hostname);
    return saved;
  }

  async function runVerification(domain: Domain, reason: 'verify' | 'reverify'): Promise<Domain> {
    // a verified domain keeps serving through a failed check; a new one waits or fails (checks.ts)
    const saved = await deps.checks.run(domain, reason);
    if (!saved) throw new HttpError('not_found', `${domain.hostname} was removed meanwhile.`);
    return saved;
  }

  return {
    async add(project: Project, input: unknown): Promise<Domain> {
      // what was sent is checked first: a malformed name is 400 on every plan
      const checked = validateDomainHostname(input, rules);
      if ('error' in checked) throw new HttpError('invalid_hostname', checked.error);
      const account = await stores.accounts.get(project.accountId);
      if (!account || account.plan === 'free') throw new HttpError('plan_required', 'Custom domains need a paid plan (pro, business or enterprise); upgrade the account first.');
      if (!project.upstream) throw new HttpError('conflict', `Project ${project.name} has no deploy yet: set its upstream before adding a domain.`);
      const previous = await stores.domains.previousOwner(checked.hostname);
      const recentlyElsewhere = previous !== null && previous.accountId !== account.id && Date.now() - Date.parse(previous.removedAt) < TAKEOVER_WINDOW_MS;
      const ownershipToken = recentlyElsewhere ? `portico-verify=${randomBytes(16).toString('hex')}` : undefined;
      const now = Date.now();
      const createdAt = new Date(now).toISOString();
      const firstCheck = now + config.domains.pendingRecheckMs;
      const domain: Domain = {
        hostname: checked.hostname,
        projectId: project.id,
        accountId: account.id,
        primary: false,
        status: 'pending',
        apex: checked.apex,
        records: dnsRecords(checked, config.platform.cnameTarget, ownershipToken),
        diagnostics: [],
        certificate: { status: 'none' },
        createdAt,
        nextCheckAt: new Date(firstCheck).toISOString(),
        recheck: { since: createdAt, attempts: 0, failuresInRow: 0 },
      };
      if (ownershipToken) domain.ownershipToken = ownershipToken;
      const wanted = domain.records.map((r) => `${r.type} ${r.name} → ${r.value}`).join(', ');
      const added = domainEvent('added', `Added to project ${project.name}. Create these DNS records: ${wanted}. Portico checks them by itself; nobody needs to press Verify.`, { records: domain.records }, now);
      if ((await stores.domains.create(domain, added)) === 'taken') {
        const owner = await stores.domains.get(checked.hostname);
        throw new HttpError('conflict', owner?.projectId === project.id ? `${checked.hostname} is already a domain of this project.` : `${checked.hostname} is attached to another project.`);
      }
      await deps.checks.scheduleFirst(domain);
      return domain;
    },

    /** the project's domains, oldest first, optionally only those with this status and health */
    async list(project: Project, filters: { status?: string | null; health?: string | null } = {}): Promise<Domain[]> {
      const { status, health } = filters;
      if (status && !DOMAIN_STATUSES.includes(status as DomainStatus)) throw new HttpError('invalid_request', `"status" must be one of ${DOMAIN_STATUSES.join(', ')}.`);
      if (health && !HEALTHS.includes(health as DomainHealth)) throw new HttpError('invalid_request', `"health" must be one of ${HEALTHS.join(', ')}.`);
      const all = await stores.domains.listByProject(project.id);
      return all.filter((d) => (!status || d.status === status) && (!health || (d.health ?? 'ok') === health));
    },
    get: (project: Project, hostname: string) => domainOf(project, hostname),
    /** the domain's timeline, oldest first */
    async events(project: Project, hostname: string): Promise<DomainEvent[]> {
      const domain = await domainOf(project, hostname);
      return stores.domains.events(domain.hostname);
    },
    // the check stores what it found (and may make the domain primary) in the project's turn itself,
    // after its DNS lookup (rechecks.ts)
    verify: async (project: Project, hostname: string) => runVerification(await domainOf(project, hostname), 'verify'),
    reverify: async (project: Project, hostname: string) => runVerification(await domainOf(project, hostname), 'reverify'),

    patch: (project: Project, hostname: string, body: Record<string, unknown>) => oneAtATime(project, () => patch(project, hostname, body)),
    addRedirect: (project: Project, body: Record<string, unknown>) => addRedirect(project, body),
    removeRedirect: (project: Project, from: string) => oneAtATime(project, () => removeRedirect(project, from)),
    remove: (project: Project, hostname: string) => oneAtATime(project, () => remove(project, hostname)),
  };

  async function patch(project: Project, hostname: string, body: Record<string, unknown>): Promise<Domain> {
    const domain = await domainOf(project, hostname);
    const next: Domain = { ...domain };
    if (body.primary !== undefined) {
      if (body.primary !== true) throw new HttpError('invalid_request', '"primary" can only be set to true; make another domain primary instead.');
      if (domain.status !== 'verified') throw new HttpError('conflict', `${domain.hostname} must be verified before it can be primary.`);
      if (domain.redirect) throw new HttpError('conflict', `${domain.hostname} redirects to ${domain.redirect.to}; remove the redirect first.`);
      for (const sibling of await stores.domains.listByProject(project.id)) {
        if (sibling.primary && sibling.hostname !== domain.hostname) await save({ ...sibling, primary: false });
      }
      next.primary = true;
    }
    if (body.hsts !== undefined) next.hsts = parseHsts(body.hsts);
    return save(next);
  }

  async function addRedirect(project: Project, body: Record<string, unknown>): Promise<{ from: string; to: string; status: RedirectStatus }> {
    if (typeof body.from !== 'string') throw new HttpError('invalid_request', '"from" is required: a domain of this project.');
    if (typeof body.to !== 'string' || body.to.trim() === '') throw new HttpError('invalid_request', '"to" is required: the hostname to send visitors to.');
    const status = (body.status === undefined ? 301 : body.status) as RedirectStatus;
    if (!REDIRECT_STATUSES.includes(status)) throw new HttpError('invalid_request', `"status" must be one of ${REDIRECT_STATUSES.join(', ')}.`);
    const from = (await domainOf(project, body.from)).hostname;
    const to = validateRedirectTarget(body.to);
    if (to === from) throw new HttpError('invalid_request', 'A domain cannot redirect to itself.');
    // The loop check reads the target, which may be a domain of another project: a change there (its
    // redirect back to here) is made in that project's turn, so this one takes that turn too, or both
    // pass their checks at once and make a loop. The target's project is read again inside the turns:
    // removed and added to a third project meanwhile, the turns taken are the wrong ones.
    for (let attempt = 1; ; attempt++) {
      const targetProject = (await stores.domains.get(to))?.projectId;
      const held = targetProject && targetProject !== project.id ? [project.id, targetProject] : [project.id];
      const made = await deps.turns(held, async () => {
        const target = await stores.domains.get(to);
        if (target && !held.includes(target.projectId)) return null;
        return redirectInTurn(project, from, to, status, target);
      });
      if (made) return made;
      if (attempt === 3) throw new HttpError('service_unavailable', `${to} is moving between projects; try again shortly.`, { 'retry-after': '1' });
    }
  }

  /** Decides on what it reads inside the turns of the project and of the target's project. */
  async function redirectInTurn(project: Project, from: string, to: string, status: RedirectStatus, target: Domain | null) {
    const domain = await domainOf(project, from);
    // a redirect to a domain that redirects back here closes a loop: said as such, since the chain's
    // advice (redirect to where the target leads) would be to redirect this domain to itself
    if (target?.redirect?.to === domain.hostname) throw new HttpError('conflict', `${to} redirects to ${domain.hostname}: a redirect from ${domain.hostname} to ${to} would send visitors back and forth forever. Remove the redirect of ${to} first if ${domain.hostname} should redirect to it instead.`);
    // a redirect to a domain that redirects itself is a chain, or a loop when it leads back here (over
    // other projects' domains). No loop can form: whatever would close one redirects to a domain that
    // redirects. The way back is followed only to say so: the chain's advice would close the loop too
    const back = target?.redirect ? await wayBack(target, domain.hostname) : null;
    if (back) throw new HttpError('conflict', `${to} leads back to ${domain.hostname} (${[domain.hostname, ...back].join(' → ')}): a redirect from ${domain.hostname} to ${to} would send visitors round in a loop forever. Remove one of those redirects first if ${domain.hostname} should redirect to ${to}.`);
    if (target?.redirect) throw new HttpError('conflict', `${to} redirects to ${target.redirect.to} itself; redirect ${domain.hostname} to ${target.redirect.to} instead, or remove the redirect of ${to} first.`);
    // within a project a chain is refused either way round; a domain of another project may redirect
    // here (o1 → k2 → elsewhere), or any account could block another's change by pointing at its domain
    const into = (await stores.domains.listByProject(project.id)).find((d) => d.redirect?.to === domain.hostname);
    if (into) throw new HttpError('conflict', `${into.hostname} redirects to ${domain.hostname}; a redirect of ${domain.hostname} would make that a chain. Redirect ${into.hostname} to ${to} first.`);
    // a second redirect of the same domain replaces the first (README, Admin API)
    const next: Domain = { ...domain, redirect: { to, status }, primary: false };
    await save(next);
    if (domain.primary) await promoteNextPrimary(project.id);
    return { from: domain.hostname, to, status };
  }

  /** the hostnames from `start` along its redirects to `hostname`, or null when they lead elsewhere */
  async function wayBack(start: Domain, hostname: string): Promise<string[] | null> {
    const path = [start.hostname];
    // no loop is stored, so the walk ends; the bound only stops one over records changing under it
    for (let at: Domain | null = start; at?.redirect && path.length <= 16; at = await stores.domains.get(at.redirect.to)) {
      path.push(at.redirect.to);
      if (at.redirect.to === hostname) return path;
    }
    return null;
  }

  async function removeRedirect(project: Project, from: string): Promise<void> {
    const domain = await domainOf(project, from);
    if (!domain.redirect) throw new HttpError('not_found', `${domain.hostname} has no redirect.`);
    const { redirect: _gone, ...rest } = domain;
    await save(rest);
    await promoteNextPrimary(project.id);
  }

  async function remove(project: Project, hostname: string): Promise<void> {
    const name = storedHostname(hostname);
    // a domain whose stored record cannot be read (a damaged file) is still the project's while its
    // index says so, and still removable: the store removes it from what it indexes of it
    const notHere = () => new HttpError('not_found', `${name} is not a domain of project ${project.name}.`);
    await domainOf(project, hostname).catch(async () => {
      if (!(await stores.domains.statusesByProject(project.id)).some((s) => s.hostname === name)) throw notHere();
    });
    const removed = await stores.domains.remove(name, new Date().toISOString(), domainEvent('removed', `Removed from project ${project.name}; it is no longer served.`));
    // another removal of it came first (a double click, two instances): that one answered 204
    if (!removed) throw notHere();
    await changed(name);
    await deps.checks.forget(name);
    await deps.onRemoved?.(name);
    if (removed.primary) await promoteNextPrimary(project.id);
  }

  /** The first verified, served domain becomes primary when the project has none. */
  async function promoteNextPrimary(projectId: string): Promise<void> {
    const domains = await stores.domains.listByProject(projectId);
    if (domains.some((d) => d.primary)) return;
    const next = domains.find((d) => d.status === 'verified' && !d.redirect);
    if (next) await save({ ...next, primary: true });
  }
}

export type DomainRegistry = ReturnType<typeof createDomainRegistry>;

function parseHsts(value: unknown) {
  if (value === null) return undefined;
  if (typeof value !== 'object' || Array.isArray(value)) throw new HttpError('invalid_request', '"hsts" must be {maxAge, includeSubDomains?, preload?} or null.');
  const { maxAge, includeSubDomains, preload, ...extra } = value as Record<string, unknown>;
  if (Object.keys(extra).length > 0) throw new HttpError('invalid_request', `Unknown field "hsts.${Object.keys(extra)[0]}".`);
  if (typeof maxAge !== 'number' || !Number.isSafeInteger(maxAge) || maxAge < 0) throw new HttpError('invalid_request', '"hsts.maxAge" must be a whole number of seconds ≥ 0.');
  if (includeSubDomains !== undefined && typeof includeSubDomains !== 'boolean') throw new HttpError('invalid_request', '"hsts.includeSubDomains" must be true or false.');
  if (preload !== undefined && typeof preload !== 'boolean') throw new HttpError('invalid_request', '"hsts.preload" must be true or false.');
  // https://hstspreload.org: preload needs includeSubDomains and at least a year
  if (preload && (!includeSubDomains || maxAge < 31_536_000)) throw new HttpError('invalid_request', 'HSTS preload needs includeSubDomains and maxAge ≥ 31536000.');
  return { maxAge, ...(includeSubDomains !== undefined ? { includeSubDomains } : {}), ...(preload !== undefined ? { preload } : {}) };
}

const NOT_A_TARGET = '"to" must be a hostname such as www.example.com (no scheme, path, port or IP address).';

/** ASCII that no hostname holds: a URL, a port, a space, a wildcard… (other characters go through IDNA) */
const ASCII_NOT_IN_HOSTNAME = /[^-.0-9a-z\u0080-\uffff]/i;

// A target is checked as a domain's hostname is (IDNA, a numeric last label, lengths: the same rules
// and words), but may be what a domain may not: a site outside Portico, a name under the platform
// domain (a project's default subdomain), an API hostname.
function validateRedirectTarget(to: string): string {
  const name = to.trim();
  if (ASCII_NOT_IN_HOSTNAME.test(name) || net.isIP(name) !== 0) throw new HttpError('invalid_request', NOT_A_TARGET);
  const checked = validateHostname(name, NOT_A_TARGET);
  if ('error' in checked) throw new HttpError('invalid_request', checked.error);
  return checked.hostname;
}
