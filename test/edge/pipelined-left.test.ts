// Regression test: an HTTP/1.1 visitor pipelines two requests; the first answer stalls mid-body, the
// second is answered by the upstream at once, and the visitor leaves. The second answer never
// reached the visitor (answers go in request order, RFC 9112 §9.3.2: Node's server held it behind the
// first), yet its access line said `200 aborted` and it was counted 200, because Node had built its
// head (headersSent). A visitor that left before any answer is 499; the first answer, whose head and
// part of its body went out, keeps its 200 with `aborted`.
import t from 'tap';
import diagnostics from 'node:diagnostics_channel';
import type { IncomingMessage, ServerResponse } from 'node:http';
import tls from 'node:tls';
import { setTimeout as sleep } from 'node:timers/promises';
import { rawUpstreamBed } from '../helpers/raw-upstream.ts';
import { parseExposition, scrape, sum } from '../helpers/prometheus.ts';

// the upstream's requests, in order
const arrivals: string[] = [];
const bed = await rawUpstreamBed(t, 'pipelined-left', (path, socket) => {
  arrivals.push(path);
  // 10 bytes announced, 3 sent, then silence (the upstream timeout is far away)
  if (path.startsWith('/stall')) socket.write('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc');
  else socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${path.length}\r\n\r\n${path}`);
});
const { portico, identity } = bed;
const { ports, ca } = portico;
const HOSTNAME = bed.hostname;

const until = async (what: string, check: () => boolean) => {
  for (const deadline = Date.now() + 10_000; !check(); await sleep(10)) if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
};
const lines = (path: string) => portico.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'request' && entry.path === path);
async function accessLine(path: string): Promise<Record<string, unknown>> {
  await until(`the access line of ${path}`, () => lines(path).length > 0);
  const found = lines(path);
  if (found.length !== 1) throw new Error(`${found.length} access lines for ${path}`);
  return found[0];
}
// Portico runs in this process: Node's server announces each HTTP/1.1 request with its response
// object, so the test can see when Portico has written the held answer whole
const responses = new Map<string, ServerResponse>();
const onStart = (message: unknown) => {
  const { request, response } = message as { request: IncomingMessage; response: ServerResponse };
  if (request.url !== undefined) responses.set(request.url, response);
};
diagnostics.subscribe('http.server.request.start', onStart);
t.teardown(() => diagnostics.unsubscribe('http.server.request.start', onStart));

const counted = async (status: string) => sum(parseExposition(await scrape(ports.admin)), 'portico_http_requests_total', { route: 'project', status });

function visitor(): Promise<{ socket: tls.TLSSocket; received: () => string }> {
  return new Promise((resolve, reject) => {
    let bytes = '';
    const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: HOSTNAME, ca, checkServerIdentity: identity, ALPNProtocols: ['http/1.1'] }, () => resolve({ socket, received: () => bytes }));
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (bytes += chunk));
    socket.once('error', reject);
  });
}

t.test('an answer held behind a stalled one when the visitor leaves: 499, aborted', async (t) => {
  const before = { '499': await counted('499'), '200': await counted('200') };
  const { socket, received } = await visitor();
  socket.write(`GET /stall HTTP/1.1\r\nHost: ${HOSTNAME}\r\n\r\nGET /second HTTP/1.1\r\nHost: ${HOSTNAME}\r\n\r\n`);
  await until('the first answer\'s head and 3 bytes', () => received().endsWith('\r\n\r\nabc'));
  await until('the upstream to answer /second', () => arrivals.includes('/second'));
  // held behind the first answer: Portico wrote it whole, so its head is built, yet none of it went out
  await until('Portico to end the answer to /second', () => responses.get('/second')?.writableEnded === true);
  t.ok(responses.get('/second')!.headersSent, 'its head built (headersSent)');
  t.notOk(responses.get('/second')!.writableFinished, 'not finished: still held');
  t.notMatch(received(), /second/, 'the second answer never went out');
  socket.destroy();

  t.match(await accessLine('/second'), { status: 499, aborted: true, route: 'project', protocol: '1.1' }, 'never answered: 499');
  t.match(await accessLine('/stall'), { status: 200, aborted: true }, 'the first answer started: its status, cut');
  t.equal(await counted('499') - before['499'], 1, 'counted as 499');
  t.equal(await counted('200') - before['200'], 1, 'the cut /stall as 200, not /second');
});

t.test('pipelined answers that go out keep their status, without aborted', async (t) => {
  const { socket, received } = await visitor();
  socket.write(`GET /one HTTP/1.1\r\nHost: ${HOSTNAME}\r\n\r\nGET /two HTTP/1.1\r\nHost: ${HOSTNAME}\r\nConnection: close\r\n\r\n`);
  await new Promise((resolve) => socket.once('end', resolve));
  t.match(received(), /\r\n\r\n\/one[^]*\r\n\r\n\/two$/);
  for (const path of ['/one', '/two']) {
    const line = await accessLine(path);
    t.equal(line.status, 200, `${path}: 200`);
    t.notOk('aborted' in line, `${path}: not aborted`);
  }
});
