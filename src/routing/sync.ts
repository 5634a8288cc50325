// Keeps the route table in step with the stores: the projects at start-up, then one project at a time
// as change notices arrive (from this instance or, through Redis pub/sub, from any other). Domains are
// routed from the domain store's own index, which follows domain notices itself. A `*` notice — the
// subscriber reconnected and may have missed some — reloads the projects. Failures keep the current
// table: stale routing beats no routing.
import type { Logger } from '../log.ts';
import type { Stores } from '../state/types.ts';
import type { ProjectRoute, RouteTable } from './route.ts';

export async function loadRoutes(stores: Stores, table: RouteTable): Promise<void> {
  const projects = await stores.projects.list();
  table.reset((hostname) => stores.domains.indexedRoute(hostname), new Map(projects.map((p) => [p.id, { name: p.name, upstream: p.upstream } satisfies ProjectRoute])));
}

export function followChanges(stores: Stores, table: RouteTable, log: Logger): void {
  stores.events.subscribe((topic) => {
    const colon = topic.indexOf(':');
    const kind = colon === -1 ? topic : topic.slice(0, colon);
    const id = topic.slice(colon + 1);
    let work: Promise<void>;
    if (kind === 'project') work = stores.projects.get(id).then((p) => table.setProject(id, p && { name: p.name, upstream: p.upstream }));
    else if (kind === '*') work = loadRoutes(stores, table);
    else return;
    work.catch((err) => log.warn({ err, topic }, 'could not refresh a route; keeping the previous one'));
  });
}
