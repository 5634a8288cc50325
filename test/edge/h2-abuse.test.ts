// HTTP/2 abuse against the real edge (h2-limits.ts), each from a real h2 client: Node's http2 client
// where it can send the attack, raw frames over TLS where it cannot. Each attack must end with its
// connection closed (GOAWAY, or its streams reset) within a bounded time, while a well-behaved client
// on another connection keeps being answered; its throughput and p99 during each attack are printed
// beside a quiet baseline (not asserted: two shared cores make timing noisy).
import t, { type Test } from 'tap';
import http2 from 'node:http2';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { spawnPortico, tempDir } from '../helpers/portico.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { admin, accountWithKey } from '../helpers/client.ts';
import { scrape } from '../helpers/prometheus.ts';
import { BOUND_MS, type Attempt, type AttackName } from '../helpers/h2-attack.ts';

const { NGHTTP2_ENHANCE_YOUR_CALM } = http2.constants;

const upstream = await startUpstream();
t.teardown(() => upstream.stop());
// streams that stall are reset after requestMs: 3 s here instead of 60 (1.5 s reset a well-behaved
// client's stream twice in a full test run: its Portico process starved of the CPU for that long)
const configFile = path.join(tempDir('config'), 'portico.yaml');
writeFileSync(configFile, readFileSync('config/portico.yaml', 'utf8').replace('requestMs: 60000', 'requestMs: 3000').replace('headersMs: 10000', 'headersMs: 1500'));
// a process of its own, so the attacks and the well-behaved client (in this process) compete with it
// for the CPU as outside clients would, not for its event loop
const portico = await spawnPortico({ PORTICO_CONFIG: configFile });
t.teardown(() => portico.kill());
const { ports, ca } = portico;
const owner = await accountWithKey(ports.admin, 'business');
await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'site', upstream: upstream.url });

function session(options: http2.SecureClientSessionOptions = {}): Promise<http2.ClientHttp2Session> {
  const client = http2.connect(`https://127.0.0.1:${ports.https}`, { ca, servername: 'site.localhost', checkServerIdentity: () => undefined, ...options });
  client.on('error', () => undefined);
  return new Promise((resolve, reject) => {
    client.once('connect', () => resolve(client));
    client.once('error', reject);
  });
}

// ---- the well-behaved client: GET /echo through the project, 4 at a time, on its own connection ----
interface Load {
  stop(): Promise<{ answered: number; failed: number; failures: string; perSecond: number; p50: number; p99: number }>;
}
async function wellBehaved(): Promise<Load> {
  const client = await session();
  const latencies: number[] = [];
  let failed = 0;
  const failures = new Map<string, number>();
  let running = true;
  const started = performance.now();
  const one = () =>
    new Promise<void>((resolve) => {
      const sent = performance.now();
      const stream = client.request({ ':path': '/echo', ':authority': 'site.localhost' });
      let status = 0;
      stream.on('response', (h) => (status = Number(h[':status'])));
      stream.on('error', () => undefined);
      stream.resume();
      stream.on('close', () => {
        if (status === 200) latencies.push(performance.now() - sent);
        else {
          failed++;
          const what = status === 0 ? `reset ${stream.rstCode}` : String(status);
          failures.set(what, (failures.get(what) ?? 0) + 1);
        }
        resolve();
      });
      stream.end();
    });
  const workers = Array.from({ length: 4 }, async () => {
    while (running && !client.destroyed) await one();
  });
  return {
    async stop() {
      running = false;
      await Promise.all(workers);
      const seconds = (performance.now() - started) / 1000;
      client.close();
      latencies.sort((a, b) => a - b);
      const at = (q: number) => Math.round((latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? NaN) * 10) / 10;
      return { answered: latencies.length, failed, failures: [...failures].map(([what, n]) => `${n} × ${what}`).join(', '), perSecond: Math.round(latencies.length / seconds), p50: at(0.5), p99: at(0.99) };
    },
  };
}

const report: string[] = [];
/** runs `attack` while the well-behaved client works; checks the other client was served throughout */
async function underAttack(t: Test, name: string, attack: () => Promise<void>) {
  const load = await wellBehaved();
  await attack();
  const seen = await load.stop();
  report.push(`${name.padEnd(24)} ${String(seen.perSecond).padStart(5)} req/s  p50 ${seen.p50} ms  p99 ${seen.p99} ms  (${seen.answered} answered, ${seen.failed} failed${seen.failed ? `: ${seen.failures}` : ''})`);
  t.ok(seen.answered > 0, `${name}: the other client was answered (${seen.answered} requests, ${seen.perSecond}/s, p99 ${seen.p99} ms)`);
  t.equal(seen.failed, 0, `${name}: none of its requests failed ${seen.failures}`);
}

t.test('baseline: the well-behaved client alone', async (t) => {
  await underAttack(t, 'baseline (no attack)', () => new Promise((resolve) => setTimeout(resolve, 1500)));
});

const ATTACK_SCRIPT = path.resolve(import.meta.dirname, '../helpers/h2-attack.ts');
const caFile = path.join(tempDir('ca'), 'fallback.crt');
writeFileSync(caFile, ca);
// each attack is repeated on new connections for this long, so the other client is measured under it
const ATTACK_MS = 1_500;

/** runs `name` from its own process for ATTACK_MS under the well-behaved client's load */
async function attack(t: Test, name: AttackName, expected: number | 'any' | 'closed'): Promise<Attempt[]> {
  let attempts: Attempt[] = [];
  await underAttack(t, name, async () => {
    const child = spawn(process.execPath, [ATTACK_SCRIPT, name, String(ports.https), caFile, 'site.localhost', String(ATTACK_MS)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (chunk) => (out += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), ATTACK_MS + BOUND_MS + 10_000);
    await new Promise((resolve) => child.once('close', resolve));
    clearTimeout(timer);
    attempts = (JSON.parse(out) as { attempts: Attempt[] }).attempts;
  });
  const codes = [...new Set(attempts.map((a) => a.goaway))];
  const slowest = Math.max(...attempts.map((a) => a.ms));
  t.ok(attempts.length > 0 && slowest < BOUND_MS, `${name}: each of ${attempts.length} connections was closed within ${BOUND_MS} ms (slowest ${Math.round(slowest)} ms)`);
  // a server closing on a client that is still writing may reset the TCP connection, and the reset
  // can discard the GOAWAY before the client reads it: closed without one is a reset
  // 'closed': Node resets the connection without a GOAWAY
  if (expected === 'closed') t.pass(`${name}: closed (GOAWAY codes seen: ${codes.join(', ')})`);
  else if (expected === 'any') t.ok(codes.some((c) => c !== null), `${name}: GOAWAY codes ${codes.join(', ')}`);
  else t.ok(codes.includes(expected) && codes.every((c) => c === expected || c === null), `${name}: GOAWAY ${expected} or a reset (seen ${codes.join(', ')})`);
  const first = attempts[0];
  report.push(`  ${name}: ${attempts.length} connections closed after ${Math.round(Math.min(...attempts.map((a) => a.ms)))}–${Math.round(slowest)} ms, GOAWAY ${codes.map((c) => c ?? 'none (reset)').join(' / ')}; the first: ${JSON.stringify(first.detail)}`);
  return attempts;
}

// the upstream connections the well-behaved client keeps in the pool (4 at a time) may stay open
const waitForUpstream = async (t: Test) => {
  for (const deadline = Date.now() + 5_000; upstream.openSockets > 4 && Date.now() < deadline; ) await new Promise((resolve) => setTimeout(resolve, 20));
  t.ok(upstream.openSockets <= 4, `the upstream requests the stalled streams had opened were closed (${upstream.openSockets} upstream sockets open, the pool's idle ones)`);
};

t.test('rapid reset (CVE-2023-44487): streams opened and cancelled in a loop → GOAWAY', async (t) => {
  const attempts = await attack(t, 'rapid-reset', 'any');
  const processed = Math.max(...attempts.map((a) => a.detail.lastStreamProcessed ?? 0));
  t.ok(processed < 2 * 1000, `each connection had fewer than 1000 streams processed (the most: stream ${processed})`);
});

t.test('CONTINUATION flood: a header block that never ends → GOAWAY', async (t) => {
  const attempts = await attack(t, 'continuation-flood', 'any');
  t.ok(attempts.every((a) => a.detail.answered === 0), 'no flooding request was answered');
});

t.test('SETTINGS flood, ACKs read → GOAWAY(ENHANCE_YOUR_CALM)', async (t) => {
  await attack(t, 'settings-flood', NGHTTP2_ENHANCE_YOUR_CALM);
});

t.test('PING flood, ACKs read → GOAWAY(ENHANCE_YOUR_CALM)', async (t) => {
  await attack(t, 'ping-flood', NGHTTP2_ENHANCE_YOUR_CALM);
});

t.test('streams far past SETTINGS_MAX_CONCURRENT_STREAMS → refused, then the connection closed', async (t) => {
  const attempts = await attack(t, 'streams-over-limit', 'closed');
  t.ok(attempts.some((a) => (a.detail.refusedSeen ?? 0) > 0), 'streams past the limit were refused (REFUSED_STREAM)');
  await waitForUpstream(t);
});

t.test('streams up to the limit that never send their body → reset, then GOAWAY', async (t) => {
  const attempts = await attack(t, 'bodies-never-sent', NGHTTP2_ENHANCE_YOUR_CALM);
  t.ok(attempts.every((a) => (a.detail.resetWithCancel ?? 0) >= 1), 'stalled streams were reset with CANCEL before the GOAWAY');
  await waitForUpstream(t);
});

t.test('a zero window held forever → streams reset, then GOAWAY', async (t) => {
  const attempts = await attack(t, 'zero-window', NGHTTP2_ENHANCE_YOUR_CALM);
  t.ok(attempts.every((a) => a.detail.bytesReceived === 0), 'not a byte was sent past the zero window');
  await waitForUpstream(t);
});

t.test('the closures are counted, and the listener still serves new connections', async (t) => {
  const text = await scrape(ports.admin);
  t.match(text, /portico_http2_connections_closed_total\{reason="control-frame-flood"\} [1-9]/, 'the floods');
  t.match(text, /portico_http2_connections_closed_total\{reason="stalled-streams"\} [1-9]/, 'the stalling connections');
  const client = await session();
  t.teardown(() => client.close());
  const status = await new Promise((resolve) => {
    const stream = client.request({ ':path': '/echo', ':authority': 'site.localhost' });
    stream.on('response', (h) => resolve(h[':status']));
    stream.resume();
  });
  t.equal(status, 200);
  t.comment(['the well-behaved client (4 streams at a time on its own connection):', ...report].join('\n'));
});
