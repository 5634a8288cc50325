// Prometheus side of the ops tests: parsing the text exposition format, `promtool check metrics`,
// and a real, bounded `prometheus` server scraping a target.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import http from 'node:http';
import path from 'node:path';
import { freePort } from './free-port.ts';

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  samples: Sample[];
  /** metric family name → TYPE */
  types: Map<string, string>;
  /** metric family names with a HELP line */
  helps: Set<string>;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** Parses Prometheus' text format (enough of it for assertions). */
export function parseExposition(text: string): Exposition {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  const helps = new Set<string>();
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const meta = /^# (HELP|TYPE) (\S+)(?: (.*))?$/.exec(line);
    if (meta) {
      if (meta[1] === 'TYPE') types.set(meta[2], (meta[3] ?? '').trim());
      else helps.add(meta[2]);
      continue;
    }
    if (line.startsWith('#')) continue;
    const m = SAMPLE.exec(line);
    if (!m) throw new Error(`not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(LABEL)) labels[l[1]] = l[2].replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return { samples, types, helps };
}

/** The sum of the samples of `name` whose labels include `match`. */
export function sum(exposition: Exposition, name: string, match: Record<string, string> = {}): number {
  return exposition.samples
    .filter((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v))
    .reduce((total, s) => total + s.value, 0);
}

/** Plain HTTP GET (no keep-alive, so nothing lingers after a test). */
export function httpGet(url: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
  });
}

export function scrape(port: number, pathname = '/metrics'): Promise<string> {
  return httpGet(`http://127.0.0.1:${port}${pathname}`).then((answer) => {
    if (answer.status !== 200) throw new Error(`GET ${pathname} on :${port} answered ${answer.status}: ${answer.text}`);
    return answer.text;
  });
}

const onPath = (binary: string) => spawnSync('sh', ['-c', `command -v ${binary}`], { stdio: 'ignore' }).status === 0;

/** Throws (with what to install) when a binary of Debian's `prometheus` package is missing. */
export function requirePrometheus(binary: 'promtool' | 'prometheus'): void {
  if (!onPath(binary)) {
    throw new Error(`${binary} is not installed: install the Debian package "prometheus" (apt-get install -y prometheus); npm test's ensure-deps installs it when it can`);
  }
}

/** `promtool check metrics` on `text` (stdin). */
export function promtoolCheck(text: string): { status: number | null; output: string } {
  requirePrometheus('promtool');
  const result = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8', timeout: 15_000 });
  return { status: result.status, output: `${result.stdout ?? ''}${result.stderr ?? ''}`.trim() };
}

export interface PrometheusServer {
  port: number;
  logs: string[];
  /** GET /api/v1/query?query=… → data.result */
  query(expr: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>>;
  stop(): Promise<void>;
}

/** A real Prometheus scraping `targets` (host:port) as job `job` every second; TSDB in a temp dir. */
export async function startPrometheus(job: string, targets: string[]): Promise<PrometheusServer> {
  requirePrometheus('prometheus');
  const dir = mkdtempSync(path.join(tmpdir(), 'portico-prometheus-'));
  const port = await freePort();
  const configFile = path.join(dir, 'prometheus.yml');
  writeFileSync(configFile, [
    'global:',
    '  scrape_interval: 1s',
    '  scrape_timeout: 1s',
    '  evaluation_interval: 1s',
    'scrape_configs:',
    `  - job_name: ${job}`,
    '    metrics_path: /metrics',
    '    static_configs:',
    `      - targets: [${targets.map((t) => JSON.stringify(t)).join(', ')}]`,
    '',
  ].join('\n'));
  const child: ChildProcess = spawn('prometheus', [
    `--config.file=${configFile}`,
    `--storage.tsdb.path=${path.join(dir, 'data')}`,
    '--storage.tsdb.retention.time=1h',
    `--web.listen-address=127.0.0.1:${port}`,
    '--log.level=warn',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  const logs: string[] = [];
  child.stdout!.on('data', (c: Buffer) => logs.push(c.toString()));
  child.stderr!.on('data', (c: Buffer) => logs.push(c.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));

  const query = async (expr: string) => {
    const answer = await httpGet(`http://127.0.0.1:${port}/api/v1/query?query=${encodeURIComponent(expr)}`);
    if (answer.status !== 200) throw new Error(`prometheus answered ${answer.status}: ${answer.text}`);
    const body = JSON.parse(answer.text) as { status: string; data: { result: Array<{ metric: Record<string, string>; value: [number, string] }> } };
    return body.data.result;
  };
  // ready once its HTTP API answers
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`prometheus exited:\n${logs.join('')}`);
    const ready = await httpGet(`http://127.0.0.1:${port}/-/ready`).then((a) => a.status === 200, () => false);
    if (ready) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`prometheus did not become ready:\n${logs.join('')}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    port,
    logs,
    query,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
