// h2S. Memory with stalled HTTP/2 streams: BENCH_H2_STALLED (1,000) downloads of 1 MiB opened over
// HTTP/2 (100 per connection) by a client that keeps its windows at 64 KiB and never reads. Flow
// control end to end means Portico stops reading each upstream once its stream is full, so what it
// holds per stream is bounded by its stream buffer, not by the answer's size. Portico's RSS is read
// before, while they are all stalled (once it stops growing), and after the client goes away. With
// Redis state the scenario runs on a Portico of its own (the same project), so the RSS before is not
// what the throughput scenarios left. A stalled stream keeps its upstream connection (paused), and
// the pool opens at most 256 per origin: the streams beyond wait for one, and are counted apart.
import http2 from 'node:http2';
import path from 'node:path';
import type { ScenarioDefinition } from '../lib/scenario.ts';
import { pidsOf } from '../lib/context.ts';
import type { Figure } from '../lib/measure.ts';
import { rssMiB, sleep, stop } from '../lib/proc.ts';
import { startPortico, type Portico } from '../lib/portico.ts';
import { fmt, fmtInt } from '../lib/report.ts';
import { LARGE_BYTES, LARGE_PATH } from '../lib/origin.ts';
import { H2_STALLED } from '../lib/settings.ts';

const PER_CONNECTION = 100;

export const scenario: ScenarioDefinition = {
  id: 'h2-stalled',
  plan(ctx) {
    if (ctx.origin.kind !== 'nginx') return `the ${LARGE_PATH} file is served by the nginx origin, and nginx is not installed`;
    return {
      id: 'h2-stalled',
      title: `h2S. RSS with ${fmtInt(H2_STALLED)} stalled HTTP/2 streams (${LARGE_BYTES / 1024 / 1024} MiB answers, a client that never reads)`,
      async run(): Promise<Figure[]> {
        const own = ctx.redisUrl ? await startPortico({ dataDir: path.join(ctx.tmp, 'data-stalled'), certsDir: ctx.certsDir, logFile: path.join(ctx.tmp, 'portico-stalled.log'), cpus: ctx.pinning.server, redisUrl: ctx.redisUrl }) : undefined;
        try {
          return await stall(own ?? ctx.portico, own === undefined);
        } finally {
          await stop(own?.process, 15_000);
        }
      },
    };
  },
};

async function stall(portico: Portico, shared: boolean): Promise<Figure[]> {
  const rss = () => rssMiB(pidsOf(portico.process)());
  const before = rss();
  const sessions: http2.ClientHttp2Session[] = [];
  let answered = 0;
  let failed = 0;
  for (let opened = 0; opened < H2_STALLED; opened += PER_CONNECTION) {
    const session = http2.connect(`https://127.0.0.1:${portico.https}`, { servername: 'bench.localhost', rejectUnauthorized: false, settings: { initialWindowSize: 65_535 } });
    session.on('error', () => undefined);
    sessions.push(session);
    for (let i = 0; i < Math.min(PER_CONNECTION, H2_STALLED - opened); i++) {
      const stream = session.request({ ':authority': 'bench.localhost', ':path': LARGE_PATH });
      stream.on('error', () => { failed++; });
      stream.once('response', (headers) => { if (headers[':status'] === 200) answered++; else failed++; });
      stream.pause();
    }
  }
  // settled: no stream answered and RSS within 1 MiB over the last 2 s (at most 30 s)
  let last = { answered: -1, rss: -Infinity };
  let peak = before;
  for (let i = 0; i < 15; i++) {
    await sleep(2000);
    const now = rss();
    peak = Math.max(peak, now);
    if (answered + failed >= H2_STALLED || (answered === last.answered && Math.abs(now - last.rss) < 1)) break;
    last = { answered, rss: now };
  }
  const stalled = rss();
  for (const session of sessions) session.destroy();
  await sleep(2000);
  const after = rss();
  const perStream = ((stalled - before) * 1024) / Math.max(1, answered);
  const waiting = H2_STALLED - answered - failed;
  console.log(`Portico${shared ? ' (the one of the other scenarios)' : ' (its own)'} RSS: ${fmt(before, 0)} MiB before, ${fmt(stalled, 0)} MiB with ${fmtInt(H2_STALLED)} streams open, ${fmtInt(answered)} answered and stalled, ${fmtInt(waiting)} waiting for an upstream connection (peak ${fmt(peak, 0)}; ${failed} failed), ${fmt(after, 0)} MiB 2 s after the client left: ${fmt(perStream, 0)} KiB per stalled stream, for ${fmtInt(LARGE_BYTES / 1024)} KiB answers`);
  return [
    { label: `Portico RSS with ${fmtInt(H2_STALLED)} stalled h2 streams (${fmtInt(answered)} answered) MiB`, value: stalled, digits: 0 },
    { label: 'Portico RSS before them MiB', value: before, digits: 0 },
    { label: 'Portico RSS growth per answered stalled stream KiB', value: perStream, digits: 0 },
    { label: 'Portico RSS 2 s after the client left MiB', value: after, digits: 0 },
  ];
}
