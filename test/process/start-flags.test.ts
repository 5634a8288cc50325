// The V8 flag Portico runs with (--max-semi-space-size=8: a young generation of 8 MiB semi-spaces
// rather than V8's default, which here grows to 64 MiB and kept RSS ~30 MiB higher after bursts of new
// TLS names) is given in three places: `npm start`, the `portico` bin's shebang and the Docker image.
// They must agree; and a Node started with it really has the smaller young generation.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '../..');
const flagsOf = (words: string[]) => words.filter((word) => word.startsWith('--'));

t.test('npm start, the bin and the Docker image give Node the same flags', async (t) => {
  const start = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start;
  const fromStart = flagsOf(start.split(/\s+/));
  t.same(fromStart, ['--max-semi-space-size=8']);
  const shebang = readFileSync(path.join(ROOT, 'src/cli/main.ts'), 'utf8').split('\n')[0];
  t.match(shebang, /^#!\/usr\/bin\/env -S node /, 'env -S: a shebang with arguments');
  t.same(flagsOf(shebang.split(/\s+/)), fromStart, 'the bin');
  const entrypoint = /^ENTRYPOINT (\[.*\])$/m.exec(readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8'));
  t.ok(entrypoint, 'the Dockerfile has an exec-form ENTRYPOINT');
  t.same(flagsOf(JSON.parse(entrypoint![1]) as string[]), fromStart, 'the Docker image');
});

t.test('the flag takes effect from the command line (not from inside the process)', async (t) => {
  const newSpace = (args: string[]) => Number(execFileSync(process.execPath, [...args, '-e', `
    let keep = [];
    for (let i = 0; i < 2e6; i++) { keep.push({ i }); if (keep.length > 50000) keep = []; }
    const space = require('v8').getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
    process.stdout.write(String(space.space_size));
  `], { encoding: 'utf8' }));
  t.ok(newSpace(['--max-semi-space-size=8']) <= 16 * 1024 * 1024, 'two 8 MiB semi-spaces at most');
});
