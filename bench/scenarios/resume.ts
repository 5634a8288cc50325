// e. Resumed TLS handshake per request: wrk with `Connection: close` keeps its SSL session across
// reconnects, so every connection resumes; nginx's log ($ssl_session_reused) shows the share. For
// Portico a Node probe checks that a second connection offering the first one's ticket resumes.
import { existsSync, readFileSync } from 'node:fs';
import type { ScenarioDefinition } from '../lib/scenario.ts';
import { clearLogs, pidsOf, wrk, type BenchContext } from '../lib/context.ts';
import type { Target } from '../lib/measure.ts';
import { CONNECTIONS } from '../lib/settings.ts';

export const scenario: ScenarioDefinition = {
  id: 'resume',
  async plan(ctx) {
    if (!ctx.tools.wrk) return 'wrk is not installed';
    const { portico, nginx } = ctx;
    const headers = { connection: 'close' };
    const targets: Target[] = [{ name: 'Portico (proxy)', pids: pidsOf(portico.process), onServerCore: true, before: clearLogs(ctx), load: wrk(ctx, portico.https, 'bench.localhost', '/', { headers }) }];
    if (nginx) targets.push({ name: 'nginx (proxy)', pids: pidsOf(nginx.process), onServerCore: true, before: clearLogs(ctx), after: () => nginxReuse(ctx), load: wrk(ctx, nginx.https, 'bench.localhost', '/', { headers }) });
    else ctx.skip('e. resumed handshakes vs nginx: nginx unavailable');
    const resumes = await ticketResumes(portico.https);
    console.log(`\nnote: a second Node connection to Portico offering the first one's ticket ${resumes ? 'was resumed' : 'was NOT resumed (scenario e measures full handshakes for Portico)'}`);
    return {
      id: 'resume',
      title: 'e. resumed TLS handshake per request',
      describe: `wrk -t1 -c${CONNECTIONS} with Connection: close: a new connection per request, resuming wrk's previous session (TLS 1.3 ticket)`,
      targets,
      ratios: [
        { label: 'Portico ÷ nginx req per CPU-second', num: 'Portico (proxy)', den: 'nginx (proxy)', metric: 'perCpuSecond' },
        { label: 'Portico ÷ nginx req/s', num: 'Portico (proxy)', den: 'nginx (proxy)', metric: 'rps' },
        { label: 'Portico ÷ nginx p99', num: 'Portico (proxy)', den: 'nginx (proxy)', metric: 'p99ms' },
      ],
    };
  },
};

/** nginx's share of resumed handshakes, from its access log (buffered: up to 1 s of lines may be missing) */
function nginxReuse(ctx: BenchContext): string | undefined {
  if (!ctx.nginx || !existsSync(ctx.nginx.accessLog)) return undefined;
  const lines = readFileSync(ctx.nginx.accessLog, 'utf8').split('\n').filter(Boolean);
  const reused = lines.filter((l) => l.endsWith('reused=r')).length;
  return lines.length ? `resumed ${Math.round((reused / lines.length) * 100)}% (nginx log)` : undefined;
}

/** Whether Portico resumes a TLS session from a ticket it issued (a Node client offering it). */
async function ticketResumes(port: number): Promise<boolean> {
  const tls = await import('node:tls');
  const connect = (session?: Buffer) => new Promise<{ reused: boolean; session?: Buffer }>((resolve, reject) => {
    let ticket: Buffer | undefined;
    let reused = false;
    const socket = tls.connect({ host: '127.0.0.1', port, servername: 'bench.localhost', rejectUnauthorized: false, session });
    socket.on('session', (s: Buffer) => { ticket = s; });
    socket.once('secureConnect', () => {
      reused = socket.isSessionReused();
      socket.write('GET / HTTP/1.1\r\nHost: bench.localhost\r\nConnection: close\r\n\r\n');
    });
    socket.on('data', () => undefined);
    socket.once('error', reject);
    socket.once('close', () => resolve({ reused, session: ticket }));
  });
  const first = await connect();
  if (!first.session) return false;
  return (await connect(first.session)).reused;
}
