// The RESP reader (pure: bytes in, replies out): every reply type, replies split anywhere across
// chunks, several replies in one chunk, and bytes that are not RESP. The limiter connection's tests
// (limiter-connection.test.ts) cover it against a real redis-server.
import t, { type Test } from 'tap';
import { bulk, INCOMPLETE, ReplyError, ReplyReader, type Reply } from '../../src/ratelimit/resp.ts';

/** Feeds the chunks one by one and collects every reply as it becomes whole. */
function readAll(chunks: Buffer[]): { replies: Reply[]; reader: ReplyReader } {
  const reader = new ReplyReader();
  const replies: Reply[] = [];
  for (const chunk of chunks) {
    reader.push(chunk);
    for (let reply = reader.next(); reply !== INCOMPLETE; reply = reader.next()) replies.push(reply);
  }
  return { replies, reader };
}

// the limiter script's answer, an error, a status, a null bulk, a null array, UTF-8, a nested array
const WIRE = Buffer.from(
  '*5\r\n:0\r\n:41\r\n:-7\r\n:1741595400000\r\n:0\r\n' +
  '-NOSCRIPT No matching script. Please use EVAL.\r\n' +
  '+OK\r\n' +
  '$-1\r\n' +
  '*-1\r\n' +
  '$7\r\nzürich\r\n' +
  '*2\r\n*1\r\n$0\r\n\r\n*0\r\n',
);

function check(t: Test, replies: Reply[]): void {
  t.equal(replies.length, 7);
  t.same(replies[0], [0, 41, -7, 1741595400000, 0], 'an array of integers');
  t.ok(replies[1] instanceof ReplyError, 'an error answer is a ReplyError');
  t.equal((replies[1] as ReplyError).message, 'NOSCRIPT No matching script. Please use EVAL.');
  t.equal((replies[1] as ReplyError).code, 'REDIS_REPLY_ERROR');
  t.equal(replies[2], 'OK');
  t.equal(replies[3], null, 'null bulk');
  t.equal(replies[4], null, 'null array');
  t.same(replies.slice(5), ['zürich', [[''], []]], 'UTF-8 bulk and nested arrays');
}

t.test('replies in one chunk', async (t) => {
  const { replies, reader } = readAll([WIRE]);
  check(t, replies);
  t.equal(reader.next(), INCOMPLETE, 'nothing left');
});

t.test('the same bytes split at every position, and one byte at a time', async (t) => {
  for (let at = 1; at < WIRE.length; at++) {
    const { replies } = readAll([WIRE.subarray(0, at), WIRE.subarray(at)]);
    if (replies.length !== 7 || JSON.stringify(replies.slice(2)) !== JSON.stringify(['OK', null, null, 'zürich', [[''], []]])) {
      t.fail(`split at byte ${at}: ${JSON.stringify(replies)}`);
      return;
    }
  }
  t.pass('every split read the same seven replies');
  check(t, readAll([...WIRE].map((byte) => Buffer.from([byte]))).replies);
});

t.test('a reply is given only once whole', async (t) => {
  const reader = new ReplyReader();
  t.equal(reader.next(), INCOMPLETE, 'nothing pushed yet');
  reader.push(Buffer.from('*2\r\n:1\r\n$5\r\nhel'));
  t.equal(reader.next(), INCOMPLETE, 'the array waits for its last item');
  reader.push(Buffer.from('lo\r'));
  t.equal(reader.next(), INCOMPLETE, 'the bulk string waits for its CRLF');
  reader.push(Buffer.from('\n:9'));
  t.same(reader.next(), [1, 'hello']);
  t.equal(reader.next(), INCOMPLETE, 'an integer waits for its CRLF');
  reader.push(Buffer.from('\r\n'));
  t.equal(reader.next(), 9);
});

t.test('bytes that are not RESP throw, and clear() starts over', async (t) => {
  for (const wire of ['?what\r\n', ':12a\r\n', '$x\r\nab\r\n', ':\r\n', '*1\r\n!\r\n']) {
    const reader = new ReplyReader();
    reader.push(Buffer.from(wire));
    t.throws(() => reader.next(), /RESP/, JSON.stringify(wire));
    reader.clear();
    reader.push(Buffer.from(':5\r\n'));
    t.equal(reader.next(), 5, `a clean start after ${JSON.stringify(wire)}`);
  }
});

t.test('bulk() counts bytes, not characters', async (t) => {
  t.equal(bulk('abc'), '$3\r\nabc\r\n');
  t.equal(bulk(''), '$0\r\n\r\n');
  t.equal(bulk('zürich'), '$7\r\nzürich\r\n');
  const reader = new ReplyReader();
  reader.push(Buffer.from(bulk('zürich')));
  t.equal(reader.next(), 'zürich', 'and reads back as written');
});
