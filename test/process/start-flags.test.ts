// The V8 flags Portico runs with are given in three places: `npm start`, the `portico` bin's shebang
// and the Docker image. They must agree, this Node must accept them (a flag it does not know stops it
// with "bad option" before Portico starts), and the young generation really is the smaller one:
// - --max-semi-space-size=8: 8 MiB semi-spaces rather than V8's default, which here grows to 64 MiB and
//   kept RSS ~30 MiB higher after bursts of new TLS names;
// - --heap-growing-percent=20: after a full collection the old generation may grow to 1.2× what is live
//   before the next one, instead of up to 4×. Under a flood of new TLS names V8 otherwise kept a heap of
//   55–65 MiB where a full collection leaves ~14 MB live (RSS 167–170 MiB after 20,000 of them at 100k
//   domains, 140–143 with it); proxy, /v1 and handshake throughput were unchanged in interleaved runs.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '../..');
const flagsOf = (words: string[]) => words.filter((word) => word.startsWith('--'));

t.test('npm start, the bin and the Docker image give Node the same flags', async (t) => {
  const start = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start;
  const fromStart = flagsOf(start.split(/\s+/));
  t.same(fromStart, ['--max-semi-space-size=8', '--heap-growing-percent=20']);
  const shebang = readFileSync(path.join(ROOT, 'src/cli/main.ts'), 'utf8').split('\n')[0];
  t.match(shebang, /^#!\/usr\/bin\/env -S node /, 'env -S: a shebang with arguments');
  t.same(flagsOf(shebang.split(/\s+/)), fromStart, 'the bin');
  const entrypoint = /^ENTRYPOINT (\[.*\])$/m.exec(readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8'));
  t.ok(entrypoint, 'the Dockerfile has an exec-form ENTRYPOINT');
  t.same(flagsOf(JSON.parse(entrypoint![1]) as string[]), fromStart, 'the Docker image');
});

t.test('this Node accepts every flag', async (t) => {
  const start = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start;
  const flags = flagsOf(start.split(/\s+/));
  t.equal(execFileSync(process.execPath, [...flags, '-e', 'process.stdout.write("started")'], { encoding: 'utf8' }), 'started');
  // the check can fail: a misspelt flag is refused
  t.throws(() => execFileSync(process.execPath, ['--heap-growing-percentage=20', '-e', '0'], { stdio: 'pipe' }), /bad option/);
});

t.test('the young generation flag takes effect from the command line (not from inside the process)', async (t) => {
  const newSpace = (args: string[]) => Number(execFileSync(process.execPath, [...args, '-e', `
    let keep = [];
    for (let i = 0; i < 2e6; i++) { keep.push({ i }); if (keep.length > 50000) keep = []; }
    const space = require('v8').getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
    process.stdout.write(String(space.space_size));
  `], { encoding: 'utf8' }));
  t.ok(newSpace(['--max-semi-space-size=8']) <= 16 * 1024 * 1024, 'two 8 MiB semi-spaces at most');
});
