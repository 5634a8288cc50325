// c. Redirect: the plain-HTTP listener's 308 to https://<host><path>, against nginx `return 308`.
import type { ScenarioDefinition } from '../lib/scenario.ts';
import { clearLogs, pidsOf, wrk } from '../lib/context.ts';
import type { Target } from '../lib/measure.ts';
import { expectStatus, get } from '../lib/check.ts';
import { CONNECTIONS } from '../lib/settings.ts';

export const scenario: ScenarioDefinition = {
  id: 'redirect',
  async plan(ctx) {
    if (!ctx.tools.wrk) return 'wrk is not installed';
    const { portico, nginx } = ctx;
    await expectStatus('Portico redirect', get({ scheme: 'http', port: portico.http, hostname: 'bench.localhost', path: '/docs/start?x=1' }), 308);
    const plain = { scheme: 'http' as const, headers: { host: 'bench.localhost' } };
    const targets: Target[] = [{ name: 'Portico HTTP → 308', pids: pidsOf(portico.process), onServerCore: true, before: clearLogs(ctx), load: wrk(ctx, portico.http, 'bench.localhost', '/docs/start?x=1', plain) }];
    if (nginx) targets.push({ name: 'nginx return 308', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs(ctx), load: wrk(ctx, nginx.http, 'bench.localhost', '/docs/start?x=1', plain) });
    else ctx.skip('c. redirect vs nginx: nginx unavailable');
    return {
      id: 'redirect',
      title: 'c. redirect (plain HTTP listener → https://<host><path>)',
      describe: `wrk -t1 -c${CONNECTIONS}, HTTP keep-alive, every request answered 308 with Location`,
      targets,
      ratios: [
        { label: 'Portico ÷ nginx req per CPU-second', num: 'Portico HTTP → 308', den: 'nginx return 308', metric: 'perCpuSecond' },
        { label: 'Portico ÷ nginx req/s', num: 'Portico HTTP → 308', den: 'nginx return 308', metric: 'rps' },
        { label: 'Portico ÷ nginx p99', num: 'Portico HTTP → 308', den: 'nginx return 308', metric: 'p99ms' },
      ],
    };
  },
};
