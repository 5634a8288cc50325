// Log lines (src/log-buffer.ts): gathered ~16 KB at a time, written in order, at least every 250 ms,
// flushed at exit; partial writes finished, a slow reader waited for, a failed write survived.
import t from 'tap';
import { spawn } from 'node:child_process';
import { openSync, closeSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { LogBuffer } from '../../src/log-buffer.ts';
import { tempDir, cleanup } from '../helpers/portico.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** A stand-in for fs.writeSync that records what reached the "file" and can fail on cue. */
function recorder(script: Array<number | string> = []) {
  const written: Buffer[] = [];
  let calls = 0;
  const writeSync = (_fd: number, buffer: Buffer, offset: number, length: number): number => {
    calls++;
    const step = script.shift();
    if (typeof step === 'string') throw Object.assign(new Error(step), { code: step });
    const n = typeof step === 'number' ? Math.min(step, length) : length;
    written.push(Buffer.from(buffer.subarray(offset, offset + n)));
    return n;
  };
  return { writeSync, text: () => Buffer.concat(written).toString(), calls: () => calls };
}

t.test('lines wait until enough has gathered, then go out in one write, in order', async (t) => {
  const file = recorder();
  const buffer = new LogBuffer(99, { minBytes: 140, maxDelayMs: 0, writeSync: file.writeSync });
  const line = (i: number) => `{"n":${i},"pad":"${'x'.repeat(20)}"}\n`;
  for (let i = 0; i < 3; i++) buffer.write(line(i));
  t.equal(file.calls(), 0, '3 lines of 37 characters, under 140: nothing written yet');
  buffer.write(line(3));
  t.equal(file.calls(), 1, 'the fourth line crosses 140 characters: one write');
  t.equal(file.text(), [0, 1, 2, 3].map(line).join(''));
  buffer.write(line(4));
  buffer.flushSync();
  t.equal(file.text(), [0, 1, 2, 3, 4].map(line).join(''), 'flushSync writes the rest');
  buffer.flushSync();
  t.equal(file.calls(), 2, 'nothing pending: no empty write');
});

t.test('a partial write is finished; multi-byte characters are counted in bytes', async (t) => {
  const file = recorder([5, 3, 1000]);
  const buffer = new LogBuffer(99, { minBytes: 1, maxDelayMs: 0, writeSync: file.writeSync });
  buffer.write('{"hostname":"bücher.example","msg":"ü"}\n');
  t.equal(file.text(), '{"hostname":"bücher.example","msg":"ü"}\n');
  t.equal(file.calls(), 3);
});

t.test('a line that does not fit what is left goes after the pending ones; a huge line is written whole', async (t) => {
  const file = recorder();
  // minBytes 10,000: a 64 KiB buffer
  const buffer = new LogBuffer(99, { minBytes: 10_000, maxDelayMs: 0, writeSync: file.writeSync });
  const small = (i: number) => `{"n":${i}}\n`;
  const big = `{"big":"${'é'.repeat(15_000)}"}\n`;
  const huge = `{"huge":"${'x'.repeat(300_000)}"}\n`;
  buffer.write(small(1));
  buffer.write(small(2));
  t.equal(file.calls(), 0, 'two short lines wait');
  buffer.write(big);
  t.equal(file.calls(), 1, '15,000 × é (30,000 bytes) fits the buffer and crosses 10,000 bytes: one write');
  t.equal(file.text(), small(1) + small(2) + big);
  buffer.write(small(2));
  buffer.write(huge);
  buffer.write(small(3));
  buffer.flushSync();
  t.equal(file.calls(), 4, 'the line pending before the huge one, the huge one alone (300,000 × 3 bytes exceed the buffer), the last');
  t.equal(file.text(), small(1) + small(2) + big + small(2) + huge + small(3), 'every line whole, in order');
});

t.test('EAGAIN (a slow reader) is waited for; EPIPE costs that chunk only', async (t) => {
  const file = recorder(['EAGAIN', 'EAGAIN', 1000, 'EPIPE', 1000]);
  const buffer = new LogBuffer(99, { minBytes: 1, maxDelayMs: 0, writeSync: file.writeSync });
  buffer.write('one\n');
  t.equal(file.text(), 'one\n', 'written after two EAGAIN answers');
  t.doesNotThrow(() => buffer.write('two\n'), 'EPIPE does not reach the caller');
  buffer.write('three\n');
  t.equal(file.text(), 'one\nthree\n', 'the chunk that met EPIPE is gone, the next one is written');
});

t.test('pino writes through it, a quiet line shows up within the delay, exit flushes the rest', async (t) => {
  const dir = tempDir('log-buffer');
  t.teardown(() => cleanup(dir));
  const out = path.join(dir, 'stdout.log');
  const fd = openSync(out, 'a');
  // a real process: the logger as `portico serve` makes it, stdout to a file
  const program = `
    import { createLogger } from ${JSON.stringify(path.join(ROOT, 'src/log.ts'))};
    const log = createLogger('info');
    log.info({ hostname: 'a.example' }, 'first');
    process.stdin.once('data', () => { log.info({ key: 'secret' }, 'second'); process.exit(0); });
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', program], { stdio: ['pipe', fd, 'inherit'] });
  closeSync(fd);
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  t.teardown(() => child.kill('SIGKILL'));
  const lines = () => readFileSync(out, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
  const deadline = Date.now() + 5_000;
  while (lines().length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  t.match(lines(), [{ msg: 'first', hostname: 'a.example', level: 30 }], 'a lone line is written without waiting for 16 KB');
  child.stdin!.end('go\n');
  t.equal(await exited, 0);
  t.match(lines(), [{ msg: 'first' }, { msg: 'second', key: '[redacted]' }], 'the line logged just before process.exit is there, redacted');
});
