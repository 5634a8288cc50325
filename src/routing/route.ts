// route: the decision for one request, taken from its hostname alone. The table is in memory and
// answers with two Map lookups at most; it is patched when a domain or project changes (see sync.ts),
// never read from a store per request.
import type { DomainRoute, Environment, Hsts, RedirectStatus } from '../state/types.ts';

export type Route =
  | { kind: 'api'; environment: Environment }
  | { kind: 'project'; projectId: string; upstream: string; hsts?: Hsts }
  | { kind: 'redirect'; to: string; status: RedirectStatus; hsts?: Hsts }
  /** a known project that has no deploy yet */
  | { kind: 'undeployed'; projectId: string }
  | { kind: 'unknown' };

export interface ProjectRoute {
  name: string;
  upstream: string | null;
}

export interface RouteTable {
  resolve(hostname: string): Route;
  setDomain(hostname: string, route: DomainRoute | null): void;
  setProject(id: string, project: ProjectRoute | null): void;
  /** replaces everything (start-up, or after a missed change notice) */
  reset(domains: Map<string, DomainRoute>, projects: Map<string, ProjectRoute>): void;
  size(): { domains: number; projects: number };
  setApiHosts(apiHosts: readonly string[], stagingHosts: readonly string[]): void;
}

export function createRouteTable(apiHosts: readonly string[], stagingHosts: readonly string[], platformDomain: string): RouteTable {
  let api = apiTable(apiHosts, stagingHosts);
  let domains = new Map<string, DomainRoute>();
  let projects = new Map<string, ProjectRoute>();
  // `<name>.<platform domain>` → project id
  let defaults = new Map<string, string>();
  const unknown: Route = { kind: 'unknown' };
  const suffix = `.${platformDomain}`;

  const projectRoute = (projectId: string, hsts?: Hsts): Route => {
    const upstream = projects.get(projectId)?.upstream;
    if (!upstream) return projects.has(projectId) ? { kind: 'undeployed', projectId } : unknown;
    return hsts ? { kind: 'project', projectId, upstream, hsts } : { kind: 'project', projectId, upstream };
  };

  return {
    resolve(hostname) {
      const fixed = api.get(hostname);
      if (fixed) return fixed;
      const domain = domains.get(hostname);
      if (domain) {
        if (domain.redirect) return { kind: 'redirect', to: domain.redirect.to, status: domain.redirect.status, hsts: domain.hsts };
        return projectRoute(domain.projectId, domain.hsts);
      }
      if (hostname.endsWith(suffix)) {
        const projectId = defaults.get(hostname);
        if (projectId) return projectRoute(projectId);
      }
      return unknown;
    },
    setDomain(hostname, route) {
      if (route) domains.set(hostname, route);
      else domains.delete(hostname);
    },
    setProject(id, project) {
      const previous = projects.get(id);
      if (previous) defaults.delete(`${previous.name}${suffix}`);
      if (project) {
        projects.set(id, project);
        defaults.set(`${project.name}${suffix}`, id);
      } else projects.delete(id);
    },
    reset(nextDomains, nextProjects) {
      domains = nextDomains;
      projects = nextProjects;
      defaults = new Map([...nextProjects].map(([id, p]) => [`${p.name}${suffix}`, id]));
    },
    size: () => ({ domains: domains.size, projects: projects.size }),
    setApiHosts(nextApi, nextStaging) {
      api = apiTable(nextApi, nextStaging);
    },
  };
}

function apiTable(apiHosts: readonly string[], stagingHosts: readonly string[]): Map<string, Route> {
  const api = new Map<string, Route>();
  for (const hostname of apiHosts) api.set(hostname, { kind: 'api', environment: 'production' });
  for (const hostname of stagingHosts) api.set(hostname, { kind: 'api', environment: 'staging' });
  return api;
}
