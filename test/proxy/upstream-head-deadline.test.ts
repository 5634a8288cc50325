// Regression tests for two ways an upstream held a request past timeouts.upstreamMs: a head trickled
// one header line every 200 ms (the inactivity timer restarted on every byte, so the visitor waited
// for requestMs, 60 s, and the access line said 200 aborted), and a flood of 102 Processing interim
// answers before the final one. Hand-made upstream answers through the real edge (Portico in this
// process, TLS with SNI, the project's default hostname), over HTTP/1.1 and HTTP/2: the head must be
// complete within upstreamMs of the request (→ 504), interim answers are bounded (→ 502), and the
// visitor's connection serves its next request. A normal 100 + 103 + 200, and a slow body whose bytes
// keep moving, still pass. A silent upstream on a reused connection is not asked twice (that took
// two upstreamMs).
import t, { type Test } from 'tap';
import http2 from 'node:http2';
import net from 'node:net';
import tls from 'node:tls';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { tempDir } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';
import { rawUpstreamBed } from '../helpers/raw-upstream.ts';

const UPSTREAM_MS = 1000;
// the deadline plus what a loaded 2-core machine needs; the old code took requestMs (60 s)
const BOUND_MS = 3000;

const ROOT = path.resolve(import.meta.dirname, '../..');
const configFile = path.join(tempDir('head-deadline-config'), 'portico.yaml');
writeFileSync(configFile, readFileSync(path.join(ROOT, 'config/portico.yaml'), 'utf8').replace(/upstreamMs: \d+/, `upstreamMs: ${UPSTREAM_MS}`));

const HONEST = 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nfine!';

// path → what the upstream does with the connection once that request has come
const ANSWERS: Record<string, (socket: net.Socket) => void> = {
  // the defect as reported (every 500 ms there, with upstreamMs 2000): the head never ends
  '/trickle': (socket) => {
    socket.write('HTTP/1.1 200 OK\r\n');
    let n = 0;
    const timer = setInterval(() => socket.write(`X-${n++}: a\r\n`), 200);
    socket.once('close', () => clearInterval(timer));
  },
  '/flood': (socket) => {
    socket.write('HTTP/1.1 102 Processing\r\n\r\n'.repeat(1000) + HONEST);
  },
  // an endless flood, in bursts: held by the same bound
  '/endless-flood': (socket) => {
    const timer = setInterval(() => {
      if (socket.writableLength === 0) socket.write('HTTP/1.1 102 Processing\r\n\r\n'.repeat(100));
    }, 5);
    socket.once('close', () => clearInterval(timer));
  },
  '/interim': (socket) => {
    socket.write('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n');
    setTimeout(() => socket.write('HTTP/1.1 103 Early Hints\r\nLink: </app.js>; rel=preload; as=script\r\n\r\n'), 50);
    setTimeout(() => socket.write(HONEST), 100);
  },
  // a download slower than upstreamMs in all, its bytes never more than 200 ms apart: not a timeout
  '/slow-body': (socket) => {
    socket.write('HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n');
    let sent = 0;
    const timer = setInterval(() => {
      socket.write('x');
      if (++sent === 12) clearInterval(timer);
    }, 200);
    socket.once('close', () => clearInterval(timer));
  },
};

// requests seen, by path
const seen: Record<string, number> = {};
const bed = await rawUpstreamBed(t, 'head-deadline', (path, socket) => {
  seen[path] = (seen[path] ?? 0) + 1;
  if (path === '/silent') return;
  const answer = ANSWERS[path];
  if (answer) answer(socket);
  else socket.write(HONEST, 'latin1');
}, { PORTICO_CONFIG: configFile });
const { portico, identity } = bed;
const { ports, ca } = portico;
const HOSTNAME = bed.hostname;

interface Answer {
  status: number;
  body: string;
  ms: number;
}

/** An HTTP/1.1 visitor on one TLS connection: each get() goes on it, after the previous answer. */
interface Visitor {
  get(path: string): Promise<Answer>;
  /** the connection is still open (Portico did not close it after an answer) */
  readonly open: boolean;
}

async function visitor(t: Test): Promise<Visitor> {
  const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: HOSTNAME, ca, checkServerIdentity: identity, ALPNProtocols: ['http/1.1'] });
  await new Promise((resolve, reject) => socket.once('secureConnect', resolve).once('error', reject));
  socket.on('error', () => undefined);
  t.teardown(() => socket.destroy());
  let open = true;
  socket.once('close', () => (open = false));
  let buffered = Buffer.alloc(0);
  let waiting: (() => void) | null = null;
  socket.on('data', (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    waiting?.();
  });
  socket.on('close', () => waiting?.());
  // every answer Portico writes here has a Content-Length (its pages, and the upstream's)
  const answer = (): Answer | null => {
    const end = buffered.indexOf('\r\n\r\n');
    if (end === -1) return null;
    const head = buffered.toString('latin1', 0, end);
    const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1]);
    if (buffered.length < end + 4 + length) return null;
    const body = buffered.toString('latin1', end + 4, end + 4 + length);
    buffered = buffered.subarray(end + 4 + length);
    return { status: Number(head.slice(9, 12)), body, ms: 0 };
  };
  return {
    get(path) {
      const started = performance.now();
      socket.write(`GET ${path} HTTP/1.1\r\nHost: ${HOSTNAME}\r\n\r\n`);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no answer to ${path} in 15 s`)), 15_000);
        waiting = () => {
          const got = answer();
          if (got === null && open) return;
          waiting = null;
          clearTimeout(timer);
          if (got === null) reject(new Error(`the connection closed before the answer to ${path}`));
          else resolve({ ...got, ms: performance.now() - started });
        };
      });
    },
    get open() {
      return open;
    },
  };
}

function h2get(session: http2.ClientHttp2Session, path: string): Promise<Answer> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':path': path });
    let status = 0;
    let body = '';
    stream.on('response', (h) => (status = Number(h[':status'])));
    stream.setEncoding('latin1');
    stream.on('data', (chunk: string) => (body += chunk));
    stream.on('end', () => resolve({ status, body, ms: performance.now() - started }));
    stream.on('error', reject);
    stream.setTimeout(15_000, () => stream.destroy(new Error(`no answer to ${path} in 15 s`)));
  });
}

function h2session(t: Test): http2.ClientHttp2Session {
  const session = http2.connect(`https://${HOSTNAME}:${ports.https}`, { ca, checkServerIdentity: identity, host: '127.0.0.1' } as http2.SecureClientSessionOptions);
  session.on('error', () => undefined);
  t.teardown(() => session.close());
  return session;
}

/** after a failed answer, the visitor's connection and session each serve their next request */
async function nextServed(t: Test, h1: Visitor, session: http2.ClientHttp2Session): Promise<void> {
  const next = await h1.get('/honest');
  t.equal(next.status, 200, 'HTTP/1.1: the next request on the connection is served');
  t.equal(next.body, 'fine!');
  t.ok(h1.open, 'and the connection stays open');
  t.equal((await h2get(session, '/honest')).body, 'fine!', 'HTTP/2: the session serves its next request');
}

async function counted(kind: string): Promise<number> {
  const metrics = await admin(ports.admin, 'GET', '/metrics');
  return Number(new RegExp(`portico_upstream_errors_total\\{kind="${kind}"\\} (\\d+)`).exec(metrics.text)?.[1] ?? 0);
}

/** access lines for `path` (the log is written in batches: wait for the batch with them) */
async function accessLines(path: string, count: number): Promise<Array<Record<string, unknown>>> {
  for (let i = 0; ; i++) {
    const lines = portico.logs.filter((line) => line.includes('"msg":"request"')).map((line) => JSON.parse(line)).filter((line) => line.path === path && line.hostname === HOSTNAME);
    if (lines.length >= count || i === 40) return lines;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

t.test('a head trickled one line every 200 ms: 504 within upstreamMs, over HTTP/1.1 and HTTP/2, the connection kept', async (t) => {
  const before = await counted('timeout');
  const h1 = await visitor(t);
  const trickle = await h1.get('/trickle');
  t.equal(trickle.status, 504, 'HTTP/1.1: 504');
  t.match(trickle.body, /took too long/);
  t.ok(trickle.ms < BOUND_MS, `HTTP/1.1: answered in ${Math.round(trickle.ms)} ms (< ${BOUND_MS})`);
  t.ok(trickle.ms >= UPSTREAM_MS - 50, 'not before the deadline');

  const session = h2session(t);
  const h2 = await h2get(session, '/trickle');
  t.equal(h2.status, 504, 'HTTP/2: 504');
  t.match(h2.body, /took too long/);
  t.ok(h2.ms < BOUND_MS, `HTTP/2: answered in ${Math.round(h2.ms)} ms (< ${BOUND_MS})`);
  await nextServed(t, h1, session);

  t.equal((await counted('timeout')) - before, 2, 'counted as kind="timeout", once per protocol');
  const lines = await accessLines('/trickle', 2);
  t.same(lines.map((line) => [line.status, line.protocol]).sort(), [[504, '1.1'], [504, '2.0']], 'logged as 504, never as 200');
  for (const line of lines) t.ok((line.durationMs as number) < BOUND_MS, `logged duration ${String(line.durationMs)} ms`);
});

t.test('a flood of 102 Processing answers: 502 invalid_response, over HTTP/1.1 and HTTP/2', async (t) => {
  const before = await counted('invalid_response');
  const h1 = await visitor(t);
  const session = h2session(t);
  for (const path of ['/flood', '/endless-flood']) {
    const flood = await h1.get(path);
    t.equal(flood.status, 502, `HTTP/1.1 ${path}: 502`);
    t.match(flood.body, /not valid HTTP\/1\.1/);
    t.ok(flood.ms < BOUND_MS, `HTTP/1.1 ${path}: answered in ${Math.round(flood.ms)} ms`);
    const h2 = await h2get(session, path);
    t.equal(h2.status, 502, `HTTP/2 ${path}: 502`);
    t.ok(h2.ms < BOUND_MS, `HTTP/2 ${path}: answered in ${Math.round(h2.ms)} ms`);
  }
  await nextServed(t, h1, session);
  t.equal((await counted('invalid_response')) - before, 4, 'counted as kind="invalid_response"');
});

t.test('a normal 100 Continue, two 103 Early Hints, then 200: the 200 passes', async (t) => {
  const h1 = await (await visitor(t)).get('/interim');
  t.equal(h1.status, 200);
  t.equal(h1.body, 'fine!');
  const h2 = await h2get(h2session(t), '/interim');
  t.equal(h2.status, 200);
  t.equal(h2.body, 'fine!');
});

t.test('a body slower than upstreamMs whose bytes keep moving is not cut: the deadline is the head\'s', async (t) => {
  const h1 = await (await visitor(t)).get('/slow-body');
  t.equal(h1.status, 200);
  t.equal(h1.body, 'x'.repeat(12));
  t.ok(h1.ms > UPSTREAM_MS, `took ${Math.round(h1.ms)} ms, past upstreamMs`);
  const h2 = await h2get(h2session(t), '/slow-body');
  t.equal(h2.status, 200);
  t.equal(h2.body, 'x'.repeat(12));
});

t.test('an upstream silent on a reused connection: 504 after one upstreamMs, the request not sent again', async (t) => {
  const h1 = await visitor(t);
  // the first request leaves an idle upstream connection in Portico's pool, which the second takes
  t.equal((await h1.get('/honest')).status, 200);
  const silent = await h1.get('/silent');
  t.equal(silent.status, 504);
  t.ok(silent.ms < BOUND_MS, `answered in ${Math.round(silent.ms)} ms`);
  t.equal(seen['/silent'], 1, 'the upstream got the request once');
});
