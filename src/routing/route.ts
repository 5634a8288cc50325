// route: the decision for one request, taken from its hostname alone (pure, O(1) lookups).
import type { Environment } from '../state/types.ts';

export type Route = { kind: 'api'; environment: Environment } | { kind: 'unknown' };

export interface RouteTable {
  resolve(hostname: string): Route;
}

export function createRouteTable(apiHosts: readonly string[], stagingHosts: readonly string[]): RouteTable {
  const table = new Map<string, Route>();
  for (const hostname of apiHosts) table.set(hostname, { kind: 'api', environment: 'production' });
  for (const hostname of stagingHosts) table.set(hostname, { kind: 'api', environment: 'staging' });
  const unknown: Route = { kind: 'unknown' };
  return { resolve: (hostname) => table.get(hostname) ?? unknown };
}
