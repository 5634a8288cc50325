// A Portico (in this process, embedded state) with one project whose upstream is a Node http server on
// loopback answering with `handler`: the set-up of the edge tests that look at one project's traffic.
// Everything started is stopped by the test's teardown.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { startPortico, type Instance } from './portico.ts';
import { admin, accountWithKey } from './client.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface ProjectBed {
  portico: Instance;
  upstream: http.Server;
  /** the project's default hostname, `<name>.localhost` */
  hostname: string;
}

export async function startProjectBed(t: Teardown, name: string, handler: http.RequestListener): Promise<ProjectBed> {
  const upstream = http.createServer(handler);
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    upstream.closeAllConnections();
    return new Promise((resolve) => upstream.close(resolve));
  });
  const portico = await startPortico();
  t.teardown(() => portico.stop());
  const owner = await accountWithKey(portico.ports.admin, 'business');
  const made = await admin(portico.ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name, upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` });
  if (made.status !== 201) throw new Error(`project: ${made.status} ${made.text}`);
  return { portico, upstream, hostname: `${name}.localhost` };
}
