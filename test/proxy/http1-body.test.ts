// The answer body reader (pure: bytes in, body bytes and its end out): Content-Length, chunked and
// close-delimited framing, the input split anywhere. The client's tests against real upstreams
// (http1-client.test.ts) cover it on the wire.
import t from 'tap';
import { BodyReader, type Framing } from '../../src/proxy/http1-body.ts';
import { UpstreamError } from '../../src/proxy/upstream-error.ts';

interface Read {
  /** what data() gave, then end()'s last piece */
  body: string;
  /** end()'s last piece */
  last: string | undefined;
  ended: boolean;
  extra: boolean;
  /** data() calls, and whether one of them was empty */
  writes: number;
  emptyWrite: boolean;
  reader: BodyReader;
}

function read(framing: Framing, parts: string[]): Read {
  const out = { body: '', last: undefined as string | undefined, ended: false, extra: false, writes: 0, emptyWrite: false } as Read;
  out.reader = new BodyReader(framing, {
    data(chunk) {
      if (out.ended) throw new Error('data() after end()');
      out.writes++;
      if (chunk.length === 0) out.emptyWrite = true;
      out.body += chunk.toString('latin1');
    },
    end(last, extra) {
      if (out.ended) throw new Error('end() twice');
      out.ended = true;
      out.extra = extra;
      out.last = last?.toString('latin1');
      if (last) out.body += last.toString('latin1');
    },
  });
  for (const part of parts) out.reader.push(Buffer.from(part, 'latin1'));
  return out;
}

/** `text` in two pieces at every offset, and byte by byte */
function splits(text: string): string[][] {
  const all: string[][] = [[text], [...text]];
  for (let i = 1; i < text.length; i++) all.push([text.slice(0, i), text.slice(i)]);
  return all;
}

const CHUNKED =
  '5;x=y\r\nhello\r\n' +
  'A\r\n0123456789\r\n' +
  '1F;name="quoted;value"\r\nabcdefghijklmnopqrstuvwxyz01234\r\n' +
  '0;last=1\r\nX-Checksum: 1234\r\nX-Other: two\r\n\r\n';
const CHUNKED_BODY = 'hello0123456789abcdefghijklmnopqrstuvwxyz01234';

function failure(run: () => unknown): UpstreamError {
  try {
    run();
  } catch (err) {
    if (err instanceof UpstreamError) return err;
    throw err;
  }
  throw new Error('no error');
}

t.test('Content-Length, exact in one piece: all of it goes with the end', async (t) => {
  const r = read({ length: 5 }, ['hello']);
  t.same([r.ended, r.extra, r.last, r.writes], [true, false, 'hello', 0]);
});

t.test('Content-Length split at every offset: whole, the last piece with the end, nothing extra', async (t) => {
  for (const parts of splits('0123456789')) {
    const r = read({ length: 10 }, parts);
    t.same([r.body, r.ended, r.extra, r.emptyWrite], ['0123456789', true, false, false], parts.join('|'));
    t.equal(r.last, parts.at(-1), 'the last piece goes with end()');
  }
});

t.test('Content-Length: bytes after the body are flagged, and not passed on', async (t) => {
  const r = read({ length: 5 }, ['hel', 'loHTTP/1.1 200']);
  t.same([r.body, r.last, r.extra], ['hello', 'lo', true]);
});

t.test('Content-Length: not ended before all bytes are in', async (t) => {
  const r = read({ length: 6 }, ['hel', 'lo']);
  t.same([r.body, r.ended], ['hello', false]);
});

t.test('chunked, split at every offset: extensions and trailers dropped, no empty write', async (t) => {
  for (const parts of splits(CHUNKED)) {
    const r = read('chunked', parts);
    t.same([r.body, r.ended, r.extra, r.last, r.emptyWrite], [CHUNKED_BODY, true, false, undefined, false], JSON.stringify(parts[0]));
  }
});

t.test('chunked: bare LF line ends are refused, in a size line, after a chunk, in and after the trailers', async (t) => {
  for (const bytes of ['5\nhello\r\n0\r\n\r\n', '5\r\nhello\n0\r\n\r\n', '5\r\nhello\r\n0\r\nX-T: 1\n\r\n', '5\r\nhello\r\n0\n\n']) {
    t.equal(failure(() => read('chunked', [bytes])).kind, 'invalid_response', JSON.stringify(bytes));
  }
});

t.test('chunked: extensions as llhttp reads them; trailers checked as fields', async (t) => {
  for (const ok of ['5;a\r\n', '5;a=b\r\n', '5;a=\r\n', '5;a="b c"\r\n', '5;a="b\\"c";d\r\n', '0005\r\n']) {
    t.equal(read('chunked', [`${ok}hello\r\n0\r\nX-T: 1\r\n\r\n`]).body, 'hello', JSON.stringify(ok));
  }
  for (const bad of ['5 \r\n', '5;\r\n', '5; a=b\r\n', '5;a(b\r\n', '5;a=b\x01\r\n', '0x5\r\n', '5\r\r\n']) {
    t.equal(failure(() => read('chunked', [`${bad}hello\r\n0\r\n\r\n`])).kind, 'invalid_response', JSON.stringify(bad));
  }
  for (const trailer of ['X T: 1', 'X-T: 1\x00', ': 1', 'X-T 1']) {
    t.equal(failure(() => read('chunked', [`5\r\nhello\r\n0\r\n${trailer}\r\n\r\n`])).kind, 'invalid_response', JSON.stringify(trailer));
  }
});

t.test('chunked: not ended before the empty line after the trailers', async (t) => {
  t.same(read('chunked', ['5\r\nhello\r\n0\r\n']).ended, false);
  t.same(read('chunked', ['5\r\nhello\r\n0\r\nX-T: 1\r\n']).ended, false);
});

t.test('chunked: bytes after the last chunk are flagged', async (t) => {
  const r = read('chunked', ['2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n']);
  t.same([r.body, r.ended, r.extra], ['ok', true, true]);
});

t.test('chunked: a malformed size, a chunk without its line end, an endless size line → invalid_response', async (t) => {
  t.equal(failure(() => read('chunked', ['zz\r\nhello\r\n'])).kind, 'invalid_response');
  t.equal(failure(() => read('chunked', ['\r\n'])).kind, 'invalid_response');
  t.equal(failure(() => read('chunked', ['1234567890abc\r\n'])).kind, 'invalid_response', 'more than 12 hex digits');
  t.equal(failure(() => read('chunked', ['5\r\nhelloX\r\n'])).kind, 'invalid_response');
  t.equal(failure(() => read('chunked', ['5', ';'.repeat(2_000), ';'.repeat(2_100)])).kind, 'invalid_response', 'a partial line over 4 KiB');
});

t.test('until the close: every byte is body, atClose() ends it', async (t) => {
  const r = read('close', ['any', 'thing']);
  t.same([r.body, r.ended], ['anything', false]);
  t.ok(r.reader.atClose());
  t.same([r.ended, r.extra, r.last], [true, false, undefined]);
  t.notOk(r.reader.atClose(), 'only once');
});

t.test('atClose() does not end a Content-Length or chunked body', async (t) => {
  const fixed = read({ length: 5 }, ['hel']);
  t.notOk(fixed.reader.atClose());
  t.notOk(fixed.ended);
  const chunked = read('chunked', ['5\r\nhel']);
  t.notOk(chunked.reader.atClose());
  t.notOk(chunked.ended);
});
