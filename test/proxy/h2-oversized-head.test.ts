// Regression test: an upstream answer with too many header fields for HTTP/2 (4,000 `X-n: a`, a
// ~40 KB head HTTP/1.1 passes whole) was handed to respond() as it was. nghttp2 refused to send the
// HEADERS frame (its header block bound is 64 KiB), the stream was reset FRAME_SIZE_ERROR with no
// status, and Node closes the session on any such frame error: GOAWAY, the visitor's next stream on
// the connection refused. The access line said 200 (aborted) and no upstream error was counted.
// Now such a head becomes the invalid_response 502 page, the session stays usable, and a head that
// fits what the visitor takes (its SETTINGS_MAX_HEADER_LIST_SIZE, or 64 KiB) still passes.
import t, { type Test } from 'tap';
import http2 from 'node:http2';
import { admin } from '../helpers/client.ts';
import { rawUpstreamBed } from '../helpers/raw-upstream.ts';

// the upstream: GET /fields/N answers N header fields and "ok"; anything else answers "fine!"
const bed = await rawUpstreamBed(t, 'many-fields', (path, socket) => {
  const fields = /^\/fields\/(\d+)$/.exec(path);
  if (!fields) {
    socket.write('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nfine!');
    return;
  }
  let head = 'HTTP/1.1 200 OK\r\n';
  for (let i = 0; i < Number(fields[1]); i++) head += `X-${i}: a\r\n`;
  socket.write(`${head}Content-Length: 2\r\n\r\nok`, 'latin1');
});
const { portico, identity } = bed;
const { ports, ca } = portico;
const HOSTNAME = bed.hostname;

/** a session that takes thousands of fields (Node's client stops at 128 unless told), announcing `maxHeaderListSize` if given */
function connect(t: Test, maxHeaderListSize?: number): { session: http2.ClientHttp2Session; goaway: () => boolean } {
  const settings = maxHeaderListSize === undefined ? {} : { maxHeaderListSize };
  const session = http2.connect(`https://${HOSTNAME}:${ports.https}`, { ca, checkServerIdentity: identity, host: '127.0.0.1', maxHeaderListPairs: 10_000, settings } as http2.SecureClientSessionOptions);
  let goaway = false;
  session.on('goaway', () => (goaway = true));
  session.on('error', () => undefined);
  t.teardown(() => session.close());
  return { session, goaway: () => goaway };
}

interface Answer {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: string;
  rstCode: number;
}

function get(session: http2.ClientHttp2Session, path: string): Promise<Answer> {
  return new Promise((resolve) => {
    const stream = session.request({ ':path': path });
    let headers: http2.IncomingHttpHeaders = {};
    let body = '';
    stream.on('response', (h) => (headers = h));
    stream.setEncoding('latin1');
    stream.on('data', (chunk: string) => (body += chunk));
    // a reset or a refused stream: its status stays 0 and its rstCode tells why
    stream.on('error', () => undefined);
    stream.on('close', () => resolve({ status: Number(headers[':status'] ?? 0), headers, body, rstCode: stream.rstCode ?? 0 }));
  });
}

async function invalidResponses(): Promise<number> {
  const metrics = await admin(ports.admin, 'GET', '/metrics');
  return Number(/portico_upstream_errors_total\{kind="invalid_response"\} (\d+)/.exec(metrics.text)?.[1] ?? 0);
}

/** access lines for `path` (the log is written in batches: wait for the batch with them) */
async function accessLines(path: string, count: number): Promise<Array<Record<string, unknown>>> {
  for (let i = 0; ; i++) {
    const lines = portico.logs.filter((line) => line.includes('"msg":"request"')).map((line) => JSON.parse(line)).filter((line) => line.path === path && line.hostname === HOSTNAME);
    if (lines.length >= count || i === 40) return lines;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

t.test('4,000 header fields over HTTP/2: a 502 page, and the next stream on the session gets its own 200', async (t) => {
  const before = await invalidResponses();
  const { session, goaway } = connect(t);
  const bad = await get(session, '/fields/4000');
  t.equal(bad.rstCode, 0, 'no RST_STREAM (it was FRAME_SIZE_ERROR)');
  t.equal(bad.status, 502);
  t.match(bad.headers['content-type'], /text\/html/);
  t.match(bad.body, /not valid HTTP\/1\.1/, 'the invalid-answer page');
  t.notOk(bad.headers['x-0'], 'no upstream field reaches the visitor');
  const next = await get(session, '/next');
  t.equal(next.status, 200, 'the next stream is served (it was REFUSED_STREAM after a GOAWAY)');
  t.equal(next.body, 'fine!');
  t.notOk(goaway(), 'no GOAWAY');
  t.notOk(session.closed || session.destroyed, 'the session is still open');
  t.equal(await invalidResponses(), before + 1, 'counted as invalid_response');
  const [line] = await accessLines('/fields/4000', 1);
  t.equal(line?.status, 502, 'logged as 502, never as the upstream\'s 200');
  t.equal(line?.protocol, '2.0');
  t.notOk(line?.aborted, 'not an aborted answer');
});

t.test('a head within 64 KiB of header list passes whole to a visitor that announced no limit', async (t) => {
  const { session } = connect(t);
  // 1,000 fields of ~6 + 1 octets, 32 more each (RFC 9113 §6.5.2): ~39 KB
  const answer = await get(session, '/fields/1000');
  t.equal(answer.status, 200);
  t.equal(answer.body, 'ok');
  t.equal(answer.headers['x-0'], 'a');
  t.equal(answer.headers['x-999'], 'a', 'every field');
  // ~1,705 fields make 64 KiB with the fields Portico adds: over it, the page
  t.equal((await get(session, '/fields/1800')).status, 502, 'past 64 KiB: 502');
  t.equal((await get(session, '/next')).body, 'fine!');
});

t.test('the visitor\'s SETTINGS_MAX_HEADER_LIST_SIZE is the limit when it announced one', async (t) => {
  const small = connect(t, 20_000);
  t.equal((await get(small.session, '/fields/400')).status, 200, 'within 20,000 octets: passed');
  // Node's client would have reset the stream itself (ENHANCE_YOUR_CALM), the visitor left with nothing
  const over = await get(small.session, '/fields/600');
  t.equal(over.status, 502, 'over what the visitor takes: the page');
  t.equal(over.rstCode, 0);
  t.equal((await get(small.session, '/next')).body, 'fine!');

  // a visitor that takes 1 MB: 3,000 fields pass; 4,000 are past what nghttp2 sends in one header block
  const large = connect(t, 1_000_000);
  const fits = await get(large.session, '/fields/3000');
  t.equal(fits.status, 200, '3,000 fields pass');
  t.equal(fits.headers['x-2999'], 'a');
  t.equal(fits.body, 'ok');
  const tooMany = await get(large.session, '/fields/4000');
  t.equal(tooMany.status, 502, '4,000 fields: the page, not FRAME_SIZE_ERROR');
  t.equal(tooMany.rstCode, 0);
  t.equal((await get(large.session, '/next')).body, 'fine!', 'the session survived');
  t.notOk(large.goaway(), 'no GOAWAY');
});
