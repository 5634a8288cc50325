// The access line's string fields (src/log.ts jsonString) held to JSON.stringify on generated strings:
// printable ASCII, quotes, backslashes, control characters, non-ASCII, lone surrogates, and what a
// visitor can put in a path or an X-Forwarded-For.
import t from 'tap';
import { jsonString } from '../../src/log.ts';
import { random } from '../helpers/upstream-answers.ts';

const POOLS = [
  'abcdefghijklmnopqrstuvwxyz0123456789.-/_~%?=&',
  '"\\',
  '\u0000\u0001\t\n\r\u001f\u007f',
  'éü中😀\u2028\u2029',
  '\ud800\udbff\udc00\udfff',
];

t.test('the same text as JSON.stringify on generated strings', async (t) => {
  const next = random(7);
  let mismatches = 0;
  for (let n = 0; n < 20_000; n++) {
    const length = Math.floor(next() * 40);
    let value = '';
    for (let i = 0; i < length; i++) {
      // mostly the common alphabet, sometimes one of the others
      const pool = POOLS[next() < 0.9 ? 0 : 1 + Math.floor(next() * (POOLS.length - 1))];
      value += pool[Math.floor(next() * pool.length)];
    }
    if (jsonString(value) !== JSON.stringify(value)) mismatches++;
  }
  t.equal(mismatches, 0);
});

t.test('the values an access line carries', async (t) => {
  for (const value of ['', 'GET', 'api.localhost', '/v1/categories', '127.0.0.1', '::ffff:10.0.0.1', '2.0', 'acc_0123', '/a"b', '/a\\b', '/\u0000', '/é', '\ud800']) {
    t.equal(jsonString(value), JSON.stringify(value), JSON.stringify(value));
    t.same(JSON.parse(jsonString(value)), value, 'reads back');
  }
});
