// Keeps the route table in step with the stores: the projects at start-up, then one project at a time
// as change notices arrive (from this instance or, through Redis pub/sub, from any other). Domains are
// routed from the domain store's own index, which follows domain notices itself. A `*` notice — the
// subscriber reconnected and may have missed some — reloads the projects. Failures keep the current
// table: stale routing beats no routing. A reload that fails is tried again every `retryMs` until one
// works: after a failover the subscriber can be back before reads work again, and the notices it missed
// come no more (the table kept a project's old upstream until the next notice or restart).
import type { Logger } from '../log.ts';
import type { Project, Stores } from '../state/types.ts';
import type { ProjectRoute, RouteTable } from './route.ts';
import { readAtStart } from '../state/start-reads.ts';

const RELOAD_RETRY_MS = 1000;

/**
 * The projects at start-up. `waitMs` > 0 (shared state): a read Redis did not answer in time is tried
 * again for that long (start-reads.ts), each retry logged.
 */
export async function loadRoutes(stores: Stores, table: RouteTable, waitMs = 0, log?: Logger): Promise<void> {
  const retrying = (err: Error) => log?.warn({ err: err.message }, 'the first read of the projects failed; trying again');
  install(stores, table, await readAtStart(() => stores.projects.list(), waitMs, retrying));
}

function install(stores: Stores, table: RouteTable, projects: Project[]): void {
  table.reset((hostname) => stores.domains.indexedRoute(hostname), new Map(projects.map((p) => [p.id, { name: p.name, upstream: p.upstream } satisfies ProjectRoute])));
}

/** Follows change notices until the returned function is called. */
export function followChanges(stores: Stores, table: RouteTable, log: Logger, retryMs = RELOAD_RETRY_MS): () => void {
  let retry: NodeJS.Timeout | null = null;
  let failing = false;
  let stopped = false;
  // reloads started; only the newest installs its list
  let reloads = 0;
  // projects noticed while a reload is under way: its list may have been read before their change
  let touched: Set<string> | null = null;

  const refreshProject = (id: string) =>
    stores.projects.get(id).then((p) => table.setProject(id, p && { name: p.name, upstream: p.upstream }));

  const reload = (): void => {
    if (retry) clearTimeout(retry);
    retry = null;
    const mine = ++reloads;
    touched ??= new Set();
    stores.projects.list().then((projects) => {
      if (mine !== reloads || stopped) return;
      const late = touched ?? new Set<string>();
      touched = null;
      install(stores, table, projects);
      for (const id of late) refreshProject(id).catch(() => undefined);
      if (failing) log.info('routes reloaded after the change notices this instance may have missed');
      failing = false;
    }, (err: unknown) => {
      if (mine !== reloads || stopped) return;
      if (!failing) log.warn({ err }, `could not reload the routes after a reconnect; keeping the previous ones and trying again every ${retryMs / 1000} s`);
      failing = true;
      retry = setTimeout(reload, retryMs);
      retry.unref();
    });
  };

  stores.events.subscribe((topic) => {
    if (stopped) return;
    const colon = topic.indexOf(':');
    const kind = colon === -1 ? topic : topic.slice(0, colon);
    const id = topic.slice(colon + 1);
    if (kind === '*') return reload();
    if (kind !== 'project') return;
    touched?.add(id);
    refreshProject(id).catch((err: unknown) => log.warn({ err, topic }, 'could not refresh a route; keeping the previous one'));
  });
  return () => {
    stopped = true;
    if (retry) clearTimeout(retry);
  };
}
