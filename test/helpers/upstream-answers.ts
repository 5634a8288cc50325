// Generated upstream answers for the differential test of the HTTP/1.1 client against llhttp: mostly
// well-formed HTTP/1.1 with every framing, and a fault in some part of most of them (status line,
// field names and values, line ends, Content-Length/Transfer-Encoding combinations, chunk sizes,
// extensions, trailers, 1xx answers, bodies on HEAD/204/304, an early close). Seeded: the same seed
// gives the same answers.

/** mulberry32: small, fast, and the same sequence for the same seed everywhere */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

export interface Generated {
  method: 'GET' | 'HEAD';
  /** the answer's bytes as the upstream writes them, then closes */
  bytes: Buffer;
  /** where the upstream splits its writes (offsets into bytes) */
  splits: number[];
  /**
   * Portico refuses on purpose what llhttp takes here: another HTTP version than 1.0/1.1, a status
   * below 100, a Transfer-Encoding other than `chunked` alone (see src/proxy/http1-head.ts)
   */
  stricter: string | null;
}

const FIELDS = [
  ['Content-Type', 'text/plain; charset=utf-8'], ['Cache-Control', 'no-store'], ['Set-Cookie', 'a=1; Path=/'],
  ['Set-Cookie', 'b=2'], ['X-Request-Id', 'abc-123'], ['ETag', '"v1"'], ['Vary', 'Accept-Encoding'],
  ['Connection', 'keep-alive'], ['Connection', 'close'], ['Keep-Alive', 'timeout=5'], ['Link', '</a.css>; rel=preload'],
  ['X-Empty', ''], ['Server', 'upstream/1.0'], ['X-Quote', 'say "hi"'],
];
// bytes a faulty field may carry: each is refused by llhttp in a name, some also in a value
const ODD = ['\x00', '\x01', '\x7f', '\x0b', '\x0c', '\x1f', ' ', '\t', '\xe9', '\xa0', '"', '(', '\r', '\n', ':'];
const STATUSES = ['200', '201', '204', '206', '301', '304', '404', '500', '599', '600', '999', '099', '000', '2e2', '1e3', '20', '2000', ' 200', '+20', '-20'];
const VERSIONS = ['HTTP/1.1', 'HTTP/1.1', 'HTTP/1.1', 'HTTP/1.1', 'HTTP/1.0', 'HTTP/1.2', 'HTTP/2.0', 'HTTP/0.9', 'HTTP/2', 'http/1.1', 'HTTP/1.1 ', 'HTTPS/1.1'];
const REASONS = [' OK', ' OK', '', ' ', ' Not Found', ' O\x01K', ' O\tK', ' \xe9t\xe9', ' O\x00K', '  OK'];
const CODINGS = ['chunked', 'chunked', 'chunked', 'CHUNKED', 'Chunked ', ' chunked', 'gzip', 'gzip, chunked', 'chunked, gzip', 'chunked, chunked', ',chunked', 'chunked,', 'identity', 'xchunked', '', 'chunked;q=1', 'deflate,chunked'];
const LENGTHS = ['', '0', '00', '007', '+5', '-1', '5 5', '5,5', '0x5', ' ', '99999999999999999999', '1e2', '\t5'];

export function generate(rand: () => number): Generated {
  const pick = <T>(list: readonly T[]): T => list[Math.floor(rand() * list.length)];
  const chance = (p: number) => rand() < p;
  const method = chance(0.1) ? 'HEAD' : 'GET';
  let stricter: string | null = null;
  let text = '';

  // interim answers first, now and then
  const interims = chance(0.1) ? 1 + Math.floor(rand() * 2) : 0;
  for (let i = 0; i < interims; i++) text += `HTTP/1.1 ${pick(['100 Continue', '102 Processing', '103 Early Hints'])}\r\n${chance(0.5) ? 'Link: </a.css>; rel=preload\r\n' : ''}\r\n`;

  const version = chance(0.85) ? 'HTTP/1.1' : pick(VERSIONS);
  const status = chance(0.75) ? pick(['200', '200', '404', '301']) : pick(STATUSES);
  if (version !== 'HTTP/1.1' && version !== 'HTTP/1.0' && /^HTTP\/\d\.\d$/.test(version)) stricter = `version ${version}`;
  if (/^0\d\d$/.test(status)) stricter = `status ${status}`;
  const lines: string[] = [`${version} ${status}${pick(REASONS)}`];

  const fieldCount = Math.floor(rand() * 5);
  for (let i = 0; i < fieldCount; i++) {
    let [name, value] = pick(FIELDS);
    if (chance(0.05)) name = mutate(name, pick(ODD), rand);
    if (chance(0.08)) value = mutate(value, pick(ODD), rand);
    if (chance(0.05)) value = `${pick([' ', '\t', '  '])}${value}${pick([' ', '\t', ''])}`;
    lines.push(`${name}:${chance(0.8) ? ' ' : ''}${value}`);
    // obs-fold: a continuation line
    if (chance(0.03)) lines.push(`${pick([' ', '\t'])}folded`);
  }

  // the framing fields: none, Content-Length, Transfer-Encoding, or both
  const framing = pick(['length', 'length', 'chunked', 'chunked', 'close', 'both', 'twoLengths', 'twoEncodings']);
  let codings: string[] = [];
  const bodyText = pick(['', 'hello', 'OK', 'a longer body with spaces', 'HTTP/1.1 200 OK\r\nX-Smuggled: yes\r\nContent-Length: 8\r\n\r\nSMUGGLED', 'x'.repeat(300)]);
  if (framing === 'length' || framing === 'both' || framing === 'twoLengths') {
    const length = chance(0.85) ? String(bodyText.length + (chance(0.15) ? pick([-1, 1, 5, 100]) : 0)) : pick(LENGTHS);
    lines.push(`${pick(['Content-Length', 'content-length', 'CONTENT-LENGTH'])}: ${length}`);
    if (framing === 'twoLengths') lines.push(`Content-Length: ${chance(0.5) ? length : String(bodyText.length + 1)}`);
  }
  if (framing === 'chunked' || framing === 'both' || framing === 'twoEncodings') {
    codings.push(pick(CODINGS));
    if (framing === 'twoEncodings') codings.push(pick(CODINGS));
    for (const coding of codings) lines.push(`${pick(['Transfer-Encoding', 'transfer-encoding'])}: ${coding}`);
  }
  if (codings.length > 0 && !onlyChunked(codings)) stricter ??= `Transfer-Encoding ${JSON.stringify(codings)}`;
  // the order of the fields does not matter to framing: shuffle them after the status line
  for (let i = lines.length - 1; i > 1; i--) {
    const j = 1 + Math.floor(rand() * i);
    [lines[i], lines[j]] = [lines[j], lines[i]];
  }

  // line ends: CRLF, now and then one bare LF or bare CR
  const bad = chance(0.04) ? Math.floor(rand() * (lines.length + 1)) : -1;
  lines.forEach((line, i) => {
    text += line + (i === bad ? pick(['\n', '\r', '\r\r\n', '\n\r']) : '\r\n');
  });
  text += bad === lines.length ? pick(['\n', '\r']) : '\r\n';

  // the body, as the framing says or not
  const chunkedBody = codings.length > 0 && (chance(0.9) || framing === 'both');
  if (chunkedBody) text += chunked(bodyText, rand);
  else text += bodyText;
  if (chance(0.05)) text = text.slice(0, Math.max(1, text.length - 1 - Math.floor(rand() * Math.min(20, text.length))));

  const bytes = Buffer.from(text, 'latin1');
  const splits: number[] = [];
  if (chance(0.3)) splits.push(1 + Math.floor(rand() * Math.max(1, bytes.length - 1)));
  return { method, bytes, splits, stricter };
}

/** `body` in chunks, one time in three with one thing wrong: a size, an extension, a line end or a trailer */
function chunked(body: string, rand: () => number): string {
  const pick = <T>(list: readonly T[]): T => list[Math.floor(rand() * list.length)];
  const chance = (p: number) => rand() < p;
  const sizes: number[] = [];
  for (let at = 0; at < body.length; at += sizes[sizes.length - 1]) sizes.push(Math.min(body.length - at, 1 + Math.floor(rand() * 40)));
  const fault = chance(0.35) ? pick(['size', 'extension', 'sizeEnd', 'dataEnd', 'trailer', 'trailerEnd', 'lastEnd']) : null;
  const where = Math.floor(rand() * (sizes.length + 1));
  let out = '';
  let at = 0;
  sizes.forEach((size, i) => {
    const here = i === where;
    let sizeText = size.toString(16);
    if (chance(0.1)) sizeText = sizeText.toUpperCase();
    if (chance(0.05)) sizeText = `000${sizeText}`;
    if (here && fault === 'size') sizeText = pick([`${sizeText} `, `0x${sizeText}`, ` ${sizeText}`, `${sizeText}\t`, `-${sizeText}`, `${sizeText}g`, '']);
    out += sizeText + (chance(0.1) || (here && fault === 'extension') ? extension(rand, here && fault === 'extension') : '') + (here && fault === 'sizeEnd' ? pick(['\n', '\r', '\r\r\n']) : '\r\n');
    out += body.slice(at, at + size);
    out += here && fault === 'dataEnd' ? pick(['\n', '', 'X\r\n', '\r']) : '\r\n';
    at += size;
  });
  out += `${chance(0.05) ? '000' : '0'}${chance(0.05) ? extension(rand, false) : ''}\r\n`;
  if (chance(0.15) || fault === 'trailer') out += `${fault === 'trailer' ? pick(['X T: 1', 'X-T: 1\x00', ': 1', 'X-T 1', 'X-T: a\x7f']) : pick(['X-Trailer: 1', 'Checksum: abc', 'X-T: \xe9', 'X-T:'])}${fault === 'trailerEnd' ? '\n' : '\r\n'}`;
  out += fault === 'lastEnd' ? pick(['\n', '', '\r']) : '\r\n';
  return out;
}

function extension(rand: () => number, faulty: boolean): string {
  const list = faulty ? [';', '; a=b', ';a b', ';a=b\x01', ';a("b)', ';a="unterminated', ';a=\xe9', ';a=b ', ';=b'] : [';a', ';a=b', ';a=', ';a="b c"', ';a="b\\"c"', ';a=b;c', ';a="\xe9"'];
  return list[Math.floor(rand() * list.length)];
}

function mutate(text: string, odd: string, rand: () => number): string {
  const at = Math.floor(rand() * (text.length + 1));
  return text.slice(0, at) + odd + text.slice(at);
}

/** the rule of src/proxy/http1-head.ts: `chunked` once, and last (no empty element after it) */
function onlyChunked(codings: string[]): boolean {
  const list = codings.join(',').split(',').map((c) => c.trim().toLowerCase());
  return list[list.length - 1] === 'chunked' && list.filter((c) => c !== '').length === 1;
}
