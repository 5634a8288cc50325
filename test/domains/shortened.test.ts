// shortened() cuts a quoted DNS value (or an ACME error) for a message: the cut never splits an
// escape, so `\x1b` is not shown as `\x1` followed by "…" (regression: shortened-escape).
import t from 'tap';
import { printable, shortened } from '../../src/domains/dns-answers.ts';

t.test('shortened-escape: a value that fits is only made printable', async (t) => {
  t.equal(shortened('abc\u001bdef', 20), 'abc\\x1bdef');
  t.equal(shortened('', 3), '');
});

t.test('shortened-escape: the cut keeps whole escapes and whole characters', async (t) => {
  // 'abcd' is 4 characters shown; '\x1b' would end at 8 > 6: it is left out whole
  t.equal(shortened('abcd\u001befgh', 6), 'abcd… (9 characters)');
  t.equal(shortened('abcd\u001befgh', 8), 'abcd\\x1b… (9 characters)');
  t.equal(shortened('\u2028\u2028\u2028', 7), '\\u2028… (3 characters)');
  t.equal(shortened('ab\ncd', 3), 'ab… (5 characters)');
});

t.test('shortened-escape: generated values: never longer than max before the suffix, always a prefix of printable()', async (t) => {
  const alphabet = ['a', 'Z', '.', '\\', '\n', '\t', '\u0000', '\u001b', '\u007f', '\u0085', '\u2028', '\u202e', 'é', '😀'];
  let seed = 7;
  const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
  for (let i = 0; i < 2000; i++) {
    const length = next() % 40;
    let value = '';
    for (let j = 0; j < length; j++) value += alphabet[next() % alphabet.length];
    const max = 1 + (next() % 30);
    const shown = shortened(value, max);
    const whole = printable(value);
    if (whole.length <= max) {
      if (shown !== whole) t.fail(`${JSON.stringify(value)} (max ${max}): ${shown}`);
      continue;
    }
    const kept = shown.slice(0, shown.lastIndexOf('… ('));
    const ok = kept.length <= max && whole.startsWith(kept) && [...value].some((_, k) => printable([...value].slice(0, k).join('')) === kept);
    if (!ok) t.fail(`${JSON.stringify(value)} (max ${max}): ${shown}`);
  }
  t.pass('2000 generated values cut between characters');
});

t.test('every bidi mark is written as an escape, the Arabic letter mark (U+061C) too', async (t) => {
  for (const mark of ['\u061c', '\u200e', '\u200f', '\u202a', '\u202e', '\u2066', '\u2069']) {
    t.equal(printable(`a${mark}b`), `a\\u${mark.charCodeAt(0).toString(16).padStart(4, '0')}b`, `U+${mark.charCodeAt(0).toString(16).toUpperCase()}`);
  }
});
