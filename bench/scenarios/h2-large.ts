// h2L. Large responses: one HTTP/2 connection carrying 100 concurrent 1 MiB downloads against
// HTTP/1.1 over 100 connections (h2load --h1), the same client, the same origin file, through
// Portico; nginx the same way for reference. HTTP/2 must move them at ≥ 0.8× the HTTP/1.1 rate.
import type { ScenarioDefinition } from '../lib/scenario.ts';
import { clearLogs, h2load, pidsOf } from '../lib/context.ts';
import type { Target } from '../lib/measure.ts';
import { LARGE_BYTES, LARGE_PATH } from '../lib/origin.ts';

const STREAMS = 100;

export const scenario: ScenarioDefinition = {
  id: 'h2-large',
  plan(ctx) {
    if (!ctx.tools.h2load) return 'h2load is not installed (Debian nghttp2-client)';
    if (ctx.origin.kind !== 'nginx') return `the ${LARGE_PATH} file is served by the nginx origin, and nginx is not installed`;
    const one = { path: LARGE_PATH, clients: 1, streams: STREAMS };
    const many = { path: LARGE_PATH, clients: STREAMS, streams: 1, h1: true };
    const { portico, nginx } = ctx;
    const targets: Target[] = [
      { name: 'Portico h2, 1 connection × 100 streams', pids: pidsOf(portico.process), onServerCore: true, before: clearLogs(ctx), load: h2load(ctx, portico.https, 'portico-large-h2', one) },
      { name: 'Portico HTTP/1.1, 100 connections', pids: pidsOf(portico.process), onServerCore: true, before: clearLogs(ctx), load: h2load(ctx, portico.https, 'portico-large-h1', many) },
    ];
    if (nginx) {
      targets.push(
        { name: 'nginx h2, 1 connection × 100 streams (info)', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs(ctx), load: h2load(ctx, nginx.https, 'nginx-large-h2', one) },
        { name: 'nginx HTTP/1.1, 100 connections (info)', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs(ctx), load: h2load(ctx, nginx.https, 'nginx-large-h1', many) },
      );
    }
    return {
      id: 'h2-large',
      title: `h2L. large responses: ${STREAMS} concurrent ${LARGE_BYTES / 1024 / 1024} MiB downloads, one HTTP/2 connection against ${STREAMS} HTTP/1.1 connections`,
      describe: `h2load -c1 -m${STREAMS} (h2) and h2load --h1 -c${STREAMS} -m1 (HTTP/1.1 over TLS), GET ${LARGE_PATH} (${LARGE_BYTES} bytes from the nginx origin's file); "req/s" is downloads per second`,
      targets,
      ratios: [
        { label: 'Portico h2 ÷ Portico HTTP/1.1 downloads/s', num: 'Portico h2, 1 connection × 100 streams', den: 'Portico HTTP/1.1, 100 connections', metric: 'rps', target: { op: '>=', value: 0.8 } },
        { label: 'Portico h2 ÷ Portico HTTP/1.1 downloads per CPU-second', num: 'Portico h2, 1 connection × 100 streams', den: 'Portico HTTP/1.1, 100 connections', metric: 'perCpuSecond' },
        { label: 'nginx h2 ÷ nginx HTTP/1.1 downloads/s', num: 'nginx h2, 1 connection × 100 streams (info)', den: 'nginx HTTP/1.1, 100 connections (info)', metric: 'rps' },
        { label: 'Portico ÷ nginx h2 downloads per CPU-second', num: 'Portico h2, 1 connection × 100 streams', den: 'nginx h2, 1 connection × 100 streams (info)', metric: 'perCpuSecond' },
      ],
    };
  },
};
