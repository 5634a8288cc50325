// route: the decision for one request, taken from its hostname alone, in memory and without I/O:
// API hosts and projects are Maps here (patched when a project changes, see sync.ts); domains are
// looked up in the domain store's routing index (a sorted snapshot plus recent changes), which is
// never copied into a second map.
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

/** hostname → the route of a served domain, or null; synchronous, from memory */
export type DomainRoutes = (hostname: string) => DomainRoute | null;

export interface RouteTable {
  resolve(hostname: string): Route;
  setProject(id: string, project: ProjectRoute | null): void;
  /** replaces the projects and names the domain index (start-up, or after a missed change notice) */
  reset(domains: DomainRoutes, projects: Map<string, ProjectRoute>): void;
  setApiHosts(apiHosts: readonly string[], stagingHosts: readonly string[]): void;
}

export function createRouteTable(apiHosts: readonly string[], stagingHosts: readonly string[], platformDomain: string): RouteTable {
  let api = apiTable(apiHosts, stagingHosts);
  let domainRoute: DomainRoutes = () => null;
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
      const domain = hostname === '' ? null : domainRoute(hostname);
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
    setProject(id, project) {
      const previous = projects.get(id);
      if (previous) defaults.delete(`${previous.name}${suffix}`);
      if (project) {
        projects.set(id, project);
        defaults.set(`${project.name}${suffix}`, id);
      } else projects.delete(id);
    },
    reset(nextDomains, nextProjects) {
      domainRoute = nextDomains;
      projects = nextProjects;
      defaults = new Map([...nextProjects].map(([id, p]) => [`${p.name}${suffix}`, id]));
    },
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
