// a. Proxy keep-alive: wrk → HTTPS → bench.localhost (a project's default hostname: the route code of a
// custom domain) → the loopback origin, against nginx proxying to the same origin; informational: the
// bare undici proxy (the least a Node proxy does) and the origin on its own.
import type { ScenarioDefinition } from '../lib/scenario.ts';
import { clearLogs, pidsOf, wrk } from '../lib/context.ts';
import type { Ratio, Target } from '../lib/measure.ts';
import { CONNECTIONS } from '../lib/settings.ts';

export const scenario: ScenarioDefinition = {
  id: 'proxy',
  plan(ctx) {
    if (!ctx.tools.wrk) return 'wrk is not installed';
    const { portico, nginx, variant, bareProxy, origin } = ctx;
    const targets: Target[] = [{ name: 'Portico → origin', pids: pidsOf(portico.process), onServerCore: true, before: clearLogs(ctx), load: wrk(ctx, portico.https, 'bench.localhost', '/') }];
    if (variant) targets.push({ name: 'Portico → origin (variant)', pids: pidsOf(variant.process), onServerCore: true, load: wrk(ctx, variant.https, 'bench.localhost', '/') });
    if (nginx) targets.push({ name: 'nginx → origin', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs(ctx), load: wrk(ctx, nginx.https, 'bench.localhost', '/') });
    else ctx.skip('a. proxy vs nginx: nginx unavailable (Portico and origin measured only)');
    targets.push({ name: 'bare undici proxy (info)', pids: pidsOf(bareProxy.process), onServerCore: true, load: wrk(ctx, bareProxy.port, 'bench.localhost', '/') });
    targets.push({ name: `origin direct (http, ${origin.kind}, info)`, pids: pidsOf(origin.process), onServerCore: false, load: wrk(ctx, origin.port, '127.0.0.1', '/', { scheme: 'http' }) });
    const ratios: Ratio[] = [];
    if (nginx) {
      ratios.push(
        { label: 'Portico ÷ nginx req per CPU-second', num: 'Portico → origin', den: 'nginx → origin', metric: 'perCpuSecond', target: { op: '>=', value: 0.3 } },
        { label: 'Portico ÷ nginx req/s', num: 'Portico → origin', den: 'nginx → origin', metric: 'rps' },
        { label: 'Portico ÷ nginx p99', num: 'Portico → origin', den: 'nginx → origin', metric: 'p99ms', target: { op: '<=', value: 2 } },
        { label: 'bare undici proxy ÷ nginx req per CPU-second', num: 'bare undici proxy (info)', den: 'nginx → origin', metric: 'perCpuSecond' },
      );
    }
    ratios.push({ label: 'Portico ÷ bare undici proxy req per CPU-second', num: 'Portico → origin', den: 'bare undici proxy (info)', metric: 'perCpuSecond' });
    return {
      id: 'proxy',
      title: 'a. proxy keep-alive (custom-domain route: bench.localhost → loopback origin)',
      describe: `wrk -t1 -c${CONNECTIONS}, HTTPS keep-alive, GET / answered by the origin with 100 bytes; Portico and nginx on one core; the origin on the load core`,
      targets,
      ratios,
    };
  },
};
