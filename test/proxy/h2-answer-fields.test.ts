// Regression tests for two HTTP/1.1 upstream answers an HTTP/2 visitor could not take:
// - a 205 with `Content-Length: 5` and a body went out as HEADERS `:status 205`, `content-length: 5`
//   with END_STREAM and no DATA: a malformed message (RFC 9113 §8.1.1), which nghttp2 clients refuse
//   (nghttp: "Violation in HTTP messaging rule"; Node's client: RST_STREAM PROTOCOL_ERROR, no status),
//   while the access line said 205. A 205
//   has no content (RFC 9110 §15.3.6): now it goes out with `content-length: 0` and no body, over
//   HTTP/2 and HTTP/1.1 alike;
// - a field Node sends only once over HTTP/2 (X-Content-Type-Options, Content-Type, ETag, Date …)
//   given twice made respond() throw ERR_HTTP2_HEADER_SINGLE_VALUE: a 502 page counted as an
//   invalid_response, where an HTTP/1.1 visitor got the answer. Now identical repeats pass as one
//   field, the list fields among them (X-Content-Type-Options, Content-Encoding, Content-Language)
//   are joined with ", " when they differ, and differing values of any other (two Content-Types, two
//   Locations) are still the 502 page: which one the visitor would act on is not Portico's to guess.
// Both HTTP/2 paths: the core stream API (forward-h2.ts) and the compatibility layer (a request with
// Expect, forward.ts).
import t from 'tap';
import http2 from 'node:http2';
import tls from 'node:tls';
import { spawn } from 'node:child_process';
import { rawUpstreamBed } from '../helpers/raw-upstream.ts';
import { llhttpMessages } from '../helpers/llhttp-reference.ts';
import { parseExposition, scrape, sum } from '../helpers/prometheus.ts';

// path → the upstream's answer, as bytes on the wire
const ANSWERS: Record<string, string> = {
  '/205-body': 'HTTP/1.1 205 Reset Content\r\nContent-Length: 5\r\n\r\nhello',
  '/205-chunked': 'HTTP/1.1 205 Reset Content\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
  '/205-empty': 'HTTP/1.1 205 Reset Content\r\nContent-Length: 0\r\n\r\n',
  '/dup-nosniff': 'HTTP/1.1 200 OK\r\nX-Content-Type-Options: nosniff\r\nContent-Type: text/plain\r\nX-Content-Type-Options: nosniff\r\nContent-Length: 2\r\n\r\nOK',
  '/dup-same': 'HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Type: text/html\r\nETag: "a"\r\nETag: "a"\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\nLast-Modified: Sun, 31 Dec 2023 00:00:00 GMT\r\nLast-Modified: Sun, 31 Dec 2023 00:00:00 GMT\r\nContent-Length: 2\r\n\r\nOK',
  '/dup-location-same': 'HTTP/1.1 302 Found\r\nLocation: /a\r\nLocation: /a\r\nContent-Length: 0\r\n\r\n',
  '/dup-lists': 'HTTP/1.1 200 OK\r\nContent-Language: en\r\nContent-Language: de\r\nX-Content-Type-Options: nosniff\r\nX-Content-Type-Options: NOSNIFF\r\nContent-Length: 2\r\n\r\nOK',
  '/dup-repeatable': 'HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nVary: Accept\r\nVary: Origin\r\nContent-Length: 2\r\n\r\nOK',
  '/two-content-types': 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Type: text/html\r\nContent-Length: 2\r\n\r\nOK',
  '/two-locations': 'HTTP/1.1 302 Found\r\nLocation: /a\r\nLocation: /b\r\nContent-Length: 0\r\n\r\n',
};
const HONEST = 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nfine!';

const bed = await rawUpstreamBed(t, 'answer-fields', (path, socket) => socket.write(ANSWERS[path] ?? HONEST, 'latin1'));
const { portico, identity } = bed;
const { ports, ca } = portico;
const HOSTNAME = bed.hostname;

interface H2Answer {
  status: number;
  /** the HEADERS frame's fields in order, as the visitor received them */
  raw: string[];
  body: string;
  rstCode: number | undefined;
  error: string | undefined;
}

function connect(): http2.ClientHttp2Session {
  const session = http2.connect(`https://localhost:${ports.https}`, { ca, servername: HOSTNAME, checkServerIdentity: identity });
  session.on('error', () => undefined);
  return session;
}

function h2get(session: http2.ClientHttp2Session, path: string, method = 'GET', extra: http2.OutgoingHttpHeaders = {}): Promise<H2Answer> {
  return new Promise((resolve) => {
    const stream = session.request({ ':method': method, ':path': path, ':authority': HOSTNAME, ...extra });
    let status = 0;
    let raw: string[] = [];
    let body = '';
    let error: string | undefined;
    stream.on('response', (headers, _flags, rawHeaders: string[]) => {
      status = Number(headers[':status']);
      raw = rawHeaders;
    });
    stream.setEncoding('latin1');
    stream.on('data', (chunk: string) => (body += chunk));
    stream.on('error', (err: NodeJS.ErrnoException) => (error = err.code));
    stream.on('close', () => resolve({ status, raw, body, rstCode: stream.rstCode, error }));
  });
}

/** the values of `name` in a raw field list, in order */
const values = (raw: string[], name: string) => raw.flatMap((field, i) => (i % 2 === 0 && field === name ? [raw[i + 1]] : []));

/** the fields of a raw list without `date` (respond() adds one unless the answer has it) */
const withoutDate = (raw: string[]) => raw.flatMap((field, i) => (i % 2 === 0 && field !== 'date' ? [field, raw[i + 1]] : []));

/** two requests written at once on one HTTP/1.1 connection; every byte that came back, to the close */
function pipelined(first: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: ports.https, servername: HOSTNAME, ca, checkServerIdentity: identity, ALPNProtocols: ['http/1.1'] }, () => {
      socket.write(`GET ${first} HTTP/1.1\r\nHost: ${HOSTNAME}\r\n\r\nGET /honest HTTP/1.1\r\nHost: ${HOSTNAME}\r\nConnection: close\r\n\r\n`);
    });
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('end', () => resolve(Buffer.concat(chunks)));
    socket.on('error', reject);
    socket.setTimeout(15_000, () => socket.destroy(new Error(`no close after ${first}: ${Buffer.concat(chunks).toString('latin1')}`)));
  });
}

/** nghttp (Debian nghttp2-client, the library curl and Node use) fetching `path`: its exit code and output */
function nghttp(path: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    // SNI is left out (an IP address): Host, here :authority, decides the site
    const child = spawn('nghttp', ['-v', '-H', `:authority: ${HOSTNAME}`, `https://127.0.0.1:${ports.https}${path}`]);
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('latin1')));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('latin1')));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
  });
}

const accessLines = (path: string) => portico.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'request' && entry.path === path);
const invalidResponses = async () => sum(parseExposition(await scrape(ports.admin)), 'portico_upstream_errors_total', { kind: 'invalid_response' });

t.test('a 205 with a body reaches an HTTP/2 visitor as 205, content-length 0, no body', async (t) => {
  const session = connect();
  t.teardown(() => session.close());
  for (const path of ['/205-body', '/205-chunked', '/205-empty']) {
    const answer = await h2get(session, path);
    t.equal(answer.status, 205, `${path}: 205`);
    t.equal(answer.error, undefined, `${path}: no stream error`);
    t.equal(answer.rstCode, 0, `${path}: not reset`);
    t.same(withoutDate(answer.raw), [':status', '205', 'content-length', '0'], `${path}: content-length 0, the upstream's length never copied`);
    t.equal(answer.body, '', `${path}: no body`);
  }
  const head = await h2get(session, '/205-body', 'HEAD');
  t.same(withoutDate(head.raw), [':status', '205', 'content-length', '0'], 'HEAD: the same head');
  t.equal((await h2get(session, '/after')).body, 'fine!', 'the session and the upstream connection still serve');
  const lines = accessLines('/205-body');
  t.equal(lines.length, 2);
  t.match(lines[0], { status: 205, protocol: '2.0' });
  t.notOk('aborted' in lines[0], 'a whole answer, not aborted');
});

t.test('nghttp takes the 205 (no "Violation in HTTP messaging rule")', async (t) => {
  const { code, output } = await nghttp('/205-body');
  // nghttp exits 0 even when it refused the answer: its log says
  t.equal(code, 0, 'nghttp exits 0');
  t.notMatch(output, /Violation|PROTOCOL_ERROR|RST_STREAM/);
  t.match(output, /recv \(stream_id=\d+\) :status: 205/);
  t.match(output, /recv \(stream_id=\d+\) content-length: 0/);
});

t.test('over HTTP/1.1 a 205 has no body either: Content-Length 0, the next answer intact', async (t) => {
  for (const path of ['/205-body', '/205-chunked']) {
    const { messages, rest } = llhttpMessages(await pipelined(path), ['GET', 'GET']);
    t.equal(messages.length, 2, `${path}: two answers`);
    t.notOk(rest, `${path}: no byte outside an answer`);
    t.equal(messages[0]?.status, 205);
    t.equal(messages[0]?.headers['content-length'], '0');
    t.equal(messages[0]?.headers['transfer-encoding'], undefined);
    t.equal(messages[0]?.body, '', `${path}: the upstream's body dropped`);
    t.equal(messages[1]?.status, 200);
    t.equal(messages[1]?.body, 'fine!');
  }
});

t.test('identical repeats of a field Node sends once pass as one field', async (t) => {
  const session = connect();
  t.teardown(() => session.close());
  const before = await invalidResponses();
  const nosniff = await h2get(session, '/dup-nosniff');
  t.equal(nosniff.status, 200, 'the answer, not the 502 page');
  t.same(withoutDate(nosniff.raw), [':status', '200', 'x-content-type-options', 'nosniff', 'content-type', 'text/plain', 'content-length', '2']);
  t.equal(nosniff.body, 'OK');
  const same = await h2get(session, '/dup-same');
  t.equal(same.status, 200);
  t.same(same.raw, [':status', '200', 'content-type', 'text/html', 'etag', '"a"', 'date', 'Mon, 01 Jan 2024 00:00:00 GMT', 'last-modified', 'Sun, 31 Dec 2023 00:00:00 GMT', 'content-length', '2']);
  t.equal(same.body, 'OK');
  const location = await h2get(session, '/dup-location-same');
  t.equal(location.status, 302);
  t.same(values(location.raw, 'location'), ['/a']);
  t.equal(await invalidResponses() - before, 0, 'no invalid_response counted');
  t.match(accessLines('/dup-nosniff')[0], { status: 200, protocol: '2.0' });
});

t.test('differing values of a list field are joined; repeatable fields stay repeated', async (t) => {
  const session = connect();
  t.teardown(() => session.close());
  const lists = await h2get(session, '/dup-lists');
  t.equal(lists.status, 200);
  t.same(withoutDate(lists.raw), [':status', '200', 'content-language', 'en, de', 'x-content-type-options', 'nosniff, NOSNIFF', 'content-length', '2'], 'one field each, the values in order (RFC 9110 §5.3)');
  const repeatable = await h2get(session, '/dup-repeatable');
  t.same(withoutDate(repeatable.raw), [':status', '200', 'set-cookie', 'a=1', 'set-cookie', 'b=2', 'vary', 'Accept', 'vary', 'Origin', 'content-length', '2']);
});

t.test('two different Content-Types or Locations: the 502 page over HTTP/2, both lines over HTTP/1.1', async (t) => {
  const session = connect();
  t.teardown(() => session.close());
  const before = await invalidResponses();
  for (const path of ['/two-content-types', '/two-locations']) {
    const answer = await h2get(session, path);
    t.equal(answer.status, 502, `${path}: 502`);
    t.match(answer.body, /not valid HTTP\/1\.1/, `${path}: the page says where to look`);
    t.equal(answer.rstCode, 0);
    t.match(accessLines(path)[0], { status: 502 });
  }
  t.equal(await invalidResponses() - before, 2, 'counted as invalid_response');
  t.equal((await h2get(session, '/after')).body, 'fine!', 'the session still serves');
  // HTTP/1.1 carries the repeated lines as they came (not Portico's to merge): the visitor decides
  const bytes = (await pipelined('/two-content-types')).toString('latin1');
  t.match(bytes, /^HTTP\/1\.1 200 OK\r\n(?:[^\r]*\r\n)*?Content-Type: text\/plain\r\nContent-Type: text\/html\r\n/i);
});

t.test('the same over the compatibility path (a request with Expect)', async (t) => {
  const session = connect();
  t.teardown(() => session.close());
  const expect = { expect: '100-continue' };
  const reset = await h2get(session, '/205-body', 'GET', expect);
  t.same(withoutDate(reset.raw), [':status', '205', 'content-length', '0']);
  t.equal(reset.body, '');
  t.equal(reset.rstCode, 0);
  const nosniff = await h2get(session, '/dup-nosniff', 'GET', expect);
  t.equal(nosniff.status, 200);
  t.same(values(nosniff.raw, 'x-content-type-options'), ['nosniff']);
  t.equal(nosniff.body, 'OK');
  const lists = await h2get(session, '/dup-lists', 'GET', expect);
  t.same(values(lists.raw, 'content-language'), ['en, de']);
  const types = await h2get(session, '/two-content-types', 'GET', expect);
  t.equal(types.status, 502);
  t.match(types.body, /not valid HTTP\/1\.1/);
});
