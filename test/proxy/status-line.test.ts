// Regression tests: an upstream whose first line is not an HTTP/1.x status line (`hello world`,
// `HTTP/1.1 OK 200`, an SSH banner) held the visitor for the whole upstream timeout, then got a 504
// counted as kind="timeout"; only a complete head had its status line checked. llhttp refuses such a
// line as soon as it has it (HPE_INVALID_STATUS, HPE_INVALID_CONSTANT), nginx answers 502 at once.
// Now the head is refused as soon as its first bytes cannot begin a status line: a 502, kind
// "invalid_response". Checked through the client and through the edge with a 20 s upstream timeout
// (an answer well before it is an answer that did not wait), and against llhttp on generated status
// lines, held open after a prefix (does it refuse at once or wait?) and whole (the final verdict).
// PORTICO_DIFF_SEED and PORTICO_DIFF_COUNT repeat or widen the generated run.
import t, { type Test } from 'tap';
import http2 from 'node:http2';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createHttp1Client, UpstreamError, type Sink } from '../../src/proxy/http1-client.ts';
import { admin, request } from '../helpers/client.ts';
import { llhttpVerdict, porticoVerdict } from '../helpers/llhttp-reference.ts';
import { random } from '../helpers/upstream-answers.ts';
import { rawUpstreamBed } from '../helpers/raw-upstream.ts';
import { tempDir } from '../helpers/portico.ts';

const UPSTREAM_MS = 20_000;
// far below UPSTREAM_MS, far above what a loaded machine needs for a refusal
const BOUND_MS = 10_000;

const ROOT = path.resolve(import.meta.dirname, '../..');
const configFile = path.join(tempDir('status-line-config'), 'portico.yaml');
writeFileSync(configFile, readFileSync(path.join(ROOT, 'config/portico.yaml'), 'utf8').replace(/upstreamMs: \d+/, `upstreamMs: ${UPSTREAM_MS}`));

// as reported, and a few neighbours: none can begin an HTTP/1.x status line
const NOT_HTTP: Record<string, string[]> = {
  '/hello-world': ['hello world\r\n'],
  '/reason-first': ['HTTP/1.1 OK 200\r\n'],
  '/ssh-banner': ['SSH-2.0-OpenSSH_9.6\r\n'],
  // no line end yet: the first byte is enough
  '/ssh-no-eol': ['SSH-2.0-OpenSSH_9.6'],
  // a good start, then a wrong byte in a later read
  '/split': ['HT', 'TP/1.1 2x0 OK'],
  '/http-2': ['HTTP/2 200\r\n'],
  // after a 100 Continue, the final answer's line is checked the same way
  '/after-continue': ['HTTP/1.1 100 Continue\r\n\r\n', 'HTTP/1.1 OK 200\r\n'],
};

/** A raw upstream: `parts` by path (a request line `GET <path> HTTP/1.1`), written a few ms apart, the connection then held open. */
async function rawUpstream(t: Test, partsOf: (path: string) => string[] | undefined): Promise<string> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.once('close', () => sockets.delete(socket));
    let seen = '';
    const onData = async (chunk: Buffer) => {
      seen += chunk.toString('latin1');
      if (!seen.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      const parts = partsOf(seen.split(' ')[1]) ?? [];
      for (const [i, part] of parts.entries()) {
        if (i > 0) await sleep(5);
        if (!socket.destroyed) socket.write(part, 'latin1');
      }
    };
    socket.on('data', onData);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const discard: Sink = { write: () => true, end: () => undefined, once: () => undefined };

/** the kind a call failed with ('' when it succeeded) and how long it took */
async function outcome(client: ReturnType<typeof createHttp1Client>, origin: string, path: string): Promise<{ kind: string; ms: number }> {
  const started = performance.now();
  const call = client.request(origin, { head: `GET ${path} HTTP/1.1\r\n`, method: 'GET', body: null, onHead: () => discard });
  try {
    await call.done;
    return { kind: '', ms: performance.now() - started };
  } catch (err) {
    return { kind: err instanceof UpstreamError ? err.kind : String(err), ms: performance.now() - started };
  }
}

t.test('a first line that is not HTTP/1.x: refused at once (invalid_response), not after the upstream timeout', async (t) => {
  const origin = await rawUpstream(t, (path) => NOT_HTTP[path]);
  const client = createHttp1Client({ timeoutMs: UPSTREAM_MS, connectTimeoutMs: 2_000, maxConnections: 16 });
  t.teardown(() => client.close());
  const paths = Object.keys(NOT_HTTP);
  const results = await Promise.all(paths.map((path) => outcome(client, origin, path)));
  for (const [i, path] of paths.entries()) {
    t.equal(results[i].kind, 'invalid_response', `${path}: ${JSON.stringify(NOT_HTTP[path])}`);
    t.ok(results[i].ms < BOUND_MS, `${path}: refused in ${Math.round(results[i].ms)} ms (upstream timeout ${UPSTREAM_MS} ms)`);
  }
});

t.test('a status line arriving a byte at a time is not refused for being incomplete', async (t) => {
  const answers: Record<string, string> = {
    '/plain': 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK',
    '/no-reason': 'HTTP/1.1 204\r\n\r\n',
    '/http-1.0': 'HTTP/1.0 404 Not Found\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nNo',
    '/interim': 'HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 599 Odd \xe9\r\nContent-Length: 0\r\n\r\n',
  };
  const origin = await rawUpstream(t, (path) => (answers[path] === undefined ? undefined : [...answers[path]]));
  // idleMs 0: each answer on a new connection (the upstream answers one request per connection)
  const client = createHttp1Client({ timeoutMs: 5_000, connectTimeoutMs: 2_000, maxConnections: 8, idleMs: 0 });
  t.teardown(() => client.close());
  for (const path of Object.keys(answers)) t.equal((await outcome(client, origin, path)).kind, '', `${path} accepted`);
});

t.test('through the edge: 502 at once over HTTP/1.1 and HTTP/2, counted as invalid_response, not timeout', async (t) => {
  const bed = await rawUpstreamBed(t, 'status-line', (path, socket) => {
    const parts = NOT_HTTP[path];
    if (parts) socket.write(parts.join(''), 'latin1');
    else socket.write('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfine!');
  }, { PORTICO_CONFIG: configFile });
  const { ports, ca } = bed.portico;
  const counted = async (kind: string): Promise<number> => {
    const metrics = await admin(ports.admin, 'GET', '/metrics');
    return Number(new RegExp(`portico_upstream_errors_total\\{kind="${kind}"\\} (\\d+)`).exec(metrics.text)?.[1] ?? 0);
  };
  const before = { invalid: await counted('invalid_response'), timeout: await counted('timeout') };
  const reported = ['/hello-world', '/reason-first', '/ssh-banner'];

  const session = http2.connect(`https://${bed.hostname}:${ports.https}`, { ca, checkServerIdentity: bed.identity, host: '127.0.0.1' } as http2.SecureClientSessionOptions);
  session.on('error', () => undefined);
  t.teardown(() => session.close());
  const h2 = (path: string): Promise<{ status: number; text: string }> => new Promise((resolve, reject) => {
    const stream = session.request({ ':path': path });
    let status = 0;
    let text = '';
    stream.on('response', (headers) => (status = Number(headers[':status'])));
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => (text += chunk));
    stream.on('end', () => resolve({ status, text }));
    stream.on('error', reject);
  });
  // all at once: the old code held each for the whole upstream timeout
  const timed = async (protocol: string, path: string, answer: Promise<{ status: number; text: string }>) => {
    const started = performance.now();
    return { protocol, path, ...(await answer), ms: performance.now() - started };
  };
  const answers = await Promise.all(reported.flatMap((path) => [
    timed('HTTP/1.1', path, request(ports.https, bed.hostname, ca, { path, identity: 'localhost' })),
    timed('HTTP/2', path, h2(path)),
  ]));
  for (const { protocol, path, status, text, ms } of answers) {
    t.equal(status, 502, `${protocol} ${path}: 502`);
    t.match(text, /not valid HTTP\/1\.1/, `${protocol} ${path}: the invalid-answer page`);
    t.ok(ms < BOUND_MS, `${protocol} ${path}: answered in ${Math.round(ms)} ms (upstream timeout ${UPSTREAM_MS} ms)`);
  }

  t.equal((await counted('invalid_response')) - before.invalid, 6, 'counted as kind="invalid_response"');
  t.equal((await counted('timeout')) - before.timeout, 0, 'none as kind="timeout"');
});

// ---------------------------------------------------------------------------------------------------
// against llhttp, on generated status lines

const SEED = Number(process.env.PORTICO_DIFF_SEED ?? Math.floor(Math.random() * 2 ** 31));
const COUNT = Number(process.env.PORTICO_DIFF_COUNT ?? 400);

const VERSIONS = ['HTTP/1.1', 'HTTP/1.1', 'HTTP/1.1', 'HTTP/1.0', 'HTTP/1.2', 'HTTP/2.0', 'HTTP/0.9', 'HTTP/3.0', 'HTTP/1', 'HTTP/', 'HTTP/11', 'HTTP/1.10', 'http/1.1', 'HTTPS/1.1', 'HTTP/1.x', 'RTSP/1.0', 'ICY', ''];
const GAPS = [' ', ' ', ' ', ' ', '  ', '\t', ''];
const CODES = ['200', '200', '404', '301', '100', '103', '199', '599', '600', '999', '099', '000', '20', '2000', '2e2', 'OK', ' 200', '20x'];
const REASONS = [' OK', ' OK', '', ' ', ' Not Found', 'OK', '\tOK', ' O\x00K', ' O\x01K', ' \xe9t\xe9', ' O\x7fK', '  OK'];
const LEADS = ['', '', '', '', '', '', '\r\n', '\n', ' ', '\t'];
const ENDS = ['\r\n', '\r\n', '\r\n', '\r\n', '', '\r', '\n', '\r\r\n', '\n\r'];
const GARBAGE = ['hello world', 'SSH-2.0-OpenSSH_9.6', 'HTTP/1.1 OK 200', '<!DOCTYPE html>', '{"error":"x"}', 'H', 'HTTP', 'HTTP/1.1', 'HTTP/1.1 200'];

interface Case {
  /** the bytes, and where the upstream splits its writes */
  bytes: Buffer;
  splits: number[];
  /** held open: the whole answer the bytes begin (the line uncut, a field, a body) */
  completed: Buffer;
  /** Portico refuses on purpose what llhttp takes here (see src/proxy/http1-head.ts) */
  stricter: boolean;
}

/** a status line, right or wrong; `whole`: followed by a field, an empty line and a body, then the close */
function statusLine(rand: () => number, whole: boolean): Case {
  const pick = <T>(list: readonly T[]): T => list[Math.floor(rand() * list.length)];
  // each part right most of the time, so that about one line in three is right throughout
  const part = <T>(p: number, right: readonly T[], any: readonly T[]): T => pick(rand() < p ? right : any);
  const lead = part(0.9, [''], LEADS);
  const version = part(0.75, ['HTTP/1.1', 'HTTP/1.0'], VERSIONS);
  const code = part(0.75, ['200', '404', '301', '103', '599', '999'], CODES);
  let line = rand() < 0.05 ? pick(GARBAGE) : `${version}${part(0.85, [' '], GAPS)}${code}${part(0.8, [' OK', '', ' Not Found'], REASONS)}`;
  line = lead + line + part(0.7, ['\r\n'], ENDS);
  const completed = Buffer.from(`${line}Content-Length: 2\r\n\r\nOK`, 'latin1');
  // held open after a prefix: cut it anywhere, now and then
  if (!whole && rand() < 0.4) line = line.slice(0, 1 + Math.floor(rand() * line.length));
  const bytes = whole ? completed : Buffer.from(line, 'latin1');
  const splits: number[] = [];
  for (let at = 0; rand() < 0.5 && bytes.length > 1;) {
    at += 1 + Math.floor(rand() * Math.max(1, bytes.length - at - 1));
    if (at >= bytes.length) break;
    splits.push(at);
  }
  // llhttp skips empty lines before a status line and takes HTTP/2.0, HTTP/0.9, RTSP/1.0, ICY and 0xx statuses
  const stricter = lead === '\r\n' || lead === '\n' || ['HTTP/2.0', 'HTTP/0.9', 'RTSP/1.0', 'ICY'].includes(version) || code.startsWith('0');
  return { bytes, splits, completed, stricter };
}

function parts(c: Case): Buffer[] {
  const out: Buffer[] = [];
  let from = 0;
  for (const at of c.splits) {
    out.push(c.bytes.subarray(from, at));
    from = at;
  }
  out.push(c.bytes.subarray(from));
  return out;
}

const { HTTPParser } = createRequire(import.meta.url)('_http_common') as {
  HTTPParser: { new (): { initialize(type: number, resource: object, max: number, lenient: number): void; execute(data: Buffer): number | Error; close(): void; [key: number]: unknown }; RESPONSE: number; kOnHeadersComplete: number };
};

/** llhttp (strict), fed the parts and no close: does it refuse before it has the whole head? */
function llhttpAtOnce(c: Case): 'refused' | 'waits' {
  const parser = new HTTPParser();
  parser.initialize(HTTPParser.RESPONSE, {}, 0, 0);
  parser[HTTPParser.kOnHeadersComplete] = () => 0;
  try {
    for (const part of parts(c)) if (parser.execute(part) instanceof Error) return 'refused';
    return 'waits';
  } finally {
    parser.close();
  }
}

t.test(`the client and llhttp agree on ${COUNT} generated status lines, held open and whole (seed ${SEED})`, async (t) => {
  const rand = random(SEED);
  const held = Array.from({ length: COUNT }, () => statusLine(rand, false));
  const whole = Array.from({ length: COUNT }, () => statusLine(rand, true));
  // held open: the upstream writes the parts and waits; whole: it writes them and closes
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.once('close', () => sockets.delete(socket));
    let seen = '';
    const onData = async (chunk: Buffer) => {
      seen += chunk.toString('latin1');
      if (!seen.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      const [kind, n] = seen.split(' ')[1].slice(1).split('/');
      const c = (kind === 'held' ? held : whole)[Number(n)];
      const list = parts(c);
      for (const [i, part] of list.entries()) {
        if (i > 0) await sleep(2);
        if (socket.destroyed) return;
        if (i === list.length - 1 && kind === 'whole') socket.end(part);
        else socket.write(part);
      }
    };
    socket.on('data', onData);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // a line that waits ends in 'timeout' after timeoutMs; one refused at once is 'invalid_response' long before
  const client = createHttp1Client({ timeoutMs: 5_000, connectTimeoutMs: 5_000, maxConnections: COUNT * 2, idleMs: 0 });
  t.teardown(async () => {
    client.close();
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  const mismatches: string[] = [];
  const tally = { refusedAlike: 0, waitAlike: 0, acceptedAlike: 0, refusedWholeAlike: 0, earlier: 0, stricter: 0 };
  const heldOutcomes = held.map((_c, i) => outcome(client, origin, `/held/${i}`));
  const wholeVerdicts = whole.map((_c, i) => porticoVerdict(client, origin, 'GET', `/whole/${i}`));
  for (const [i, c] of held.entries()) {
    const { kind } = await heldOutcomes[i];
    const ours = kind === 'invalid_response' ? 'refused' : kind === 'timeout' ? 'waits' : `kind ${kind || 'none'}`;
    const reference = llhttpAtOnce(c);
    if (ours === reference) tally[ours === 'refused' ? 'refusedAlike' : 'waitAlike']++;
    // llhttp would refuse it a few bytes later (`HTTP/3` before `HTTP/3.0`): refused all the same
    else if (ours === 'refused' && !llhttpVerdict([c.completed], 'GET').accepted) tally.earlier++;
    else if (ours === 'refused' && c.stricter) tally.stricter++;
    else mismatches.push(`held ${JSON.stringify(c.bytes.toString('latin1'))} splits ${JSON.stringify(c.splits)}: Portico ${ours}, llhttp ${reference}`);
  }
  for (const [i, c] of whole.entries()) {
    const ours = await wholeVerdicts[i];
    const reference = llhttpVerdict(parts(c), 'GET');
    if (JSON.stringify(ours) === JSON.stringify(reference)) tally.acceptedAlike++;
    else if (!ours.accepted && !reference.accepted) tally.refusedWholeAlike++;
    else if (!ours.accepted && c.stricter) tally.stricter++;
    else mismatches.push(`whole ${JSON.stringify(c.bytes.toString('latin1'))} splits ${JSON.stringify(c.splits)}\n  Portico: ${JSON.stringify(ours)}\n  llhttp:  ${JSON.stringify(reference)}`);
  }
  t.same(mismatches.slice(0, 10), [], `seed ${SEED}: rerun with PORTICO_DIFF_SEED=${SEED}`);
  t.comment(`seed ${SEED}: ${JSON.stringify(tally)}`);
  // both verdicts must be common on both sides, or the comparison says little
  for (const [name, n] of Object.entries(tally)) if (name !== 'stricter' && name !== 'earlier') t.ok(n > COUNT / 20, `${name} is common (${n})`);
});
