// What the HTTP/1.1 upstream client writes, against two references, on generated requests (method, no
// body / a body with its length / a chunked body, cut into writes of any size, empty ones included):
// - llhttp in request mode (the parser behind Node's server, strict) must read exactly one request from
//   the bytes: the same method, target and fields, the whole body, nothing left over (a stray byte
//   after a request is the next request to the upstream: request smuggling);
// - Node's http client, given the same request with its framing field set (Content-Length, or
//   Transfer-Encoding: chunked) or none, must be read by llhttp alike: same framing, same body.
// Portico differs from Node's client in one place, on purpose: an empty body with a method other than
// POST, PUT or PATCH (PROPFIND, LOCK …) goes without framing fields; Node sends `Content-Length: 0`
// for all but GET, HEAD, DELETE, OPTIONS, TRACE and CONNECT. Go's Transport draws the line where
// Portico does (RFC 9110 §8.6 asks for Content-Length only when the method expects content).
// PORTICO_DIFF_SEED and PORTICO_DIFF_COUNT repeat or widen a run.
import t, { type Test } from 'tap';
import http from 'node:http';
import net from 'node:net';
import { Readable } from 'node:stream';
import type { AddressInfo } from 'node:net';
import { createHttp1Client, type Http1Client } from '../../src/proxy/http1-client.ts';
import { random } from '../helpers/upstream-answers.ts';
import { llhttpRequests, type Read } from '../helpers/llhttp-reference.ts';

const SEED = Number(process.env.PORTICO_DIFF_SEED ?? Math.floor(Math.random() * 2 ** 31));
const COUNT = Number(process.env.PORTICO_DIFF_COUNT ?? 1000);

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'TRACE', 'PROPFIND', 'LOCK'];
const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH']);
// Node's client sends an empty body without framing for these (lib/_http_client.js, useChunkedEncodingByDefault)
const NODE_NO_DEFAULT_BODY = new Set(['GET', 'HEAD', 'DELETE', 'OPTIONS', 'TRACE', 'CONNECT']);
// bytes a body may hold, framing look-alikes among them
const PIECES = ['a', 'b', '0', '\r\n', '0\r\n\r\n', 'GET / HTTP/1.1\r\n\r\n', '\x00', '\xff', ' ', 'z'.repeat(300)];

interface Case {
  method: string;
  shape: 'none' | 'length' | 'chunked';
  /** the body as it is written, write by write */
  writes: Buffer[];
}

function generate(rand: () => number): Case {
  const pick = <T>(list: readonly T[]): T => list[Math.floor(rand() * list.length)];
  const shape = pick(['none', 'length', 'chunked'] as const);
  const writes: Buffer[] = [];
  if (shape !== 'none') {
    const count = Math.floor(rand() * 5);
    for (let i = 0; i < count; i++) {
      let text = '';
      const parts = Math.floor(rand() * 4);
      for (let j = 0; j < parts; j++) text += pick(PIECES);
      writes.push(Buffer.from(text, 'latin1'));
    }
  }
  return { method: pick(METHODS), shape, writes };
}

// ---------------------------------------------------------------------------------------------------
// the upstream: answers (and closes) once llhttp has read a whole request, then keeps what else comes
// until the client closes; what a connection carried goes to the next waiting capture

async function upstream(t: Test): Promise<{ origin: string; port: number; next: () => Promise<Buffer> }> {
  const waiting: Array<(bytes: Buffer) => void> = [];
  const done: Buffer[] = [];
  const server = net.createServer((socket) => {
    socket.on('error', () => undefined);
    const chunks: Buffer[] = [];
    let answered = false;
    const answer = () => {
      if (answered) return;
      answered = true;
      socket.end('HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
    };
    // a request llhttp cannot complete is answered anyway, so the case ends (and is reported)
    const fallback = setTimeout(answer, 2_000);
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      if (llhttpRequests(Buffer.concat(chunks)).requests.length > 0) answer();
    });
    socket.on('close', () => {
      clearTimeout(fallback);
      const bytes = Buffer.concat(chunks);
      const take = waiting.shift();
      if (take) take(bytes);
      else done.push(bytes);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise((resolve) => server.close(resolve)));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    port,
    next: () => new Promise((resolve) => {
      const ready = done.shift();
      if (ready) resolve(ready);
      else waiting.push(resolve);
    }),
  };
}

async function viaPortico(client: Http1Client, origin: string, c: Case, path: string): Promise<void> {
  const body = c.shape === 'none' ? null : Readable.from(c.writes);
  const call = client.request(origin, {
    head: `${c.method} ${path} HTTP/1.1\r\nx-case: ${path}\r\n`,
    method: c.method,
    body,
    bodyLength: c.shape === 'length' ? Buffer.concat(c.writes).length : undefined,
    onHead: () => ({ write: () => true, end: () => undefined, once: () => undefined }),
  });
  await call.done;
}

function viaNode(port: number, c: Case, path: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = { 'x-case': path };
    if (c.shape === 'length') headers['content-length'] = Buffer.concat(c.writes).length;
    if (c.shape === 'chunked') headers['transfer-encoding'] = 'chunked';
    const req = http.request({ host: '127.0.0.1', port, method: c.method, path, headers, agent: false }, (res) => {
      res.resume();
      res.on('end', resolve);
    });
    req.on('error', reject);
    for (const write of c.writes) req.write(write);
    req.end();
  });
}

/** the framing fields llhttp read, as one string: `content-length: N`, `transfer-encoding: chunked`, or `none` */
function framing(read: Read): string {
  const out: string[] = [];
  for (let i = 0; i < read.fields.length; i += 2) if (read.fields[i] === 'content-length' || read.fields[i] === 'transfer-encoding') out.push(`${read.fields[i]}: ${read.fields[i + 1]}`);
  return out.join(', ') || 'none';
}

/** what Portico must write: the declared length, chunked, or for no body content-length: 0 when the method means one */
function expectedFraming(c: Case): string {
  if (c.shape === 'length') return `content-length: ${Buffer.concat(c.writes).length}`;
  if (c.shape === 'chunked') return 'transfer-encoding: chunked';
  return BODY_METHODS.has(c.method) ? 'content-length: 0' : 'none';
}

t.test(`the client's requests read by llhttp as meant, and as Node's client's (${COUNT} generated, seed ${SEED})`, async (t) => {
  const server = await upstream(t);
  const client = createHttp1Client({ timeoutMs: 5_000, connectTimeoutMs: 2_000, maxConnections: 1, idleMs: 0 });
  t.teardown(() => client.close());
  const rand = random(SEED);
  const tally = { alike: 0, onPurpose: 0 };
  const mismatches: string[] = [];
  for (let i = 0; i < COUNT && mismatches.length < 10; i++) {
    const c = generate(rand);
    const path = `/case/${i}`;
    const [portico] = await Promise.all([server.next(), viaPortico(client, server.origin, c, path)]);
    const [node] = await Promise.all([server.next(), viaNode(server.port, c, path)]);
    const ours = llhttpRequests(portico);
    const theirs = llhttpRequests(node);
    const describe = () => `#${i} ${c.method} ${c.shape} ${JSON.stringify(c.writes.map((w) => w.toString('latin1')))}\n  Portico: ${JSON.stringify(portico.toString('latin1'))}\n  Node:    ${JSON.stringify(node.toString('latin1'))}`;
    const [read] = ours.requests;
    // against the intent: one request, nothing after it, the method, target, fields and body as given
    if (ours.rest || ours.requests.length !== 1 || read.method !== c.method || read.url !== path || read.body !== Buffer.concat(c.writes).toString('latin1') || framing(read) !== expectedFraming(c) || read.fields[0] !== 'x-case' || read.fields[1] !== path) {
      mismatches.push(`not as meant: ${describe()}`);
      continue;
    }
    // against Node's client
    const [nodeRead] = theirs.requests;
    const same = !theirs.rest && theirs.requests.length === 1 && nodeRead.body === read.body && framing(nodeRead) === framing(read);
    if (same) tally.alike++;
    else if (c.shape === 'none' && !BODY_METHODS.has(c.method) && !NODE_NO_DEFAULT_BODY.has(c.method) && framing(nodeRead) === 'content-length: 0') tally.onPurpose++;
    else mismatches.push(`unlike Node's client: ${describe()}`);
  }
  t.same(mismatches, [], `seed ${SEED}: rerun with PORTICO_DIFF_SEED=${SEED}`);
  t.comment(`seed ${SEED}: ${tally.alike} alike, ${tally.onPurpose} unlike Node's client on purpose (an empty body with another method than POST, PUT, PATCH)`);
  t.ok(tally.alike > COUNT / 2 && tally.onPurpose > 0, `both outcomes are reached (${JSON.stringify(tally)})`);
});
