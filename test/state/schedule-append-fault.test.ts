// The embedded schedule on a disk that stops taking writes: an append the kernel cuts short (a file
// size limit, set on the running process with prlimit, as a full disk would) is cut back off its file
// and fails as STATE_UNAVAILABLE, so the next append starts a line of its own. Before, the next job's
// line was written after the half line and both were lost at the next read.
import t from 'tap';
import { execFileSync, spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { tempDir } from '../helpers/portico.ts';
import { openEmbeddedSchedule } from '../../src/state/embedded-schedule.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const DUE = Date.parse('2030-01-01T00:10:00Z');

t.test('a torn append is cut back; the job after it is kept', async (t) => {
  const dataDir = tempDir('schedule-fault');
  // the child owns the store. Node ignores SIGXFSZ; tap's hooks, which tap puts into every child's
  // NODE_OPTIONS, would turn it back into an exit: `env -u` takes them out after tap has added them
  const script = `
    const { openEmbeddedSchedule } = await import(${JSON.stringify(path.join(ROOT, 'src/state/embedded-schedule.ts'))});
    const store = openEmbeddedSchedule(${JSON.stringify(dataDir)});
    const lines = (await import('node:readline')).createInterface({ input: process.stdin })[Symbol.asyncIterator]();
    const tell = (text) => process.stdout.write(text + '\\n');
    await store.set('renew', 'a.example', ${DUE});
    await store.set('renew', 'b.example', ${DUE});
    tell('ready');
    await lines.next();
    await store.set('renew', 'c.example.with.a.long.name.to.cross.the.limit', ${DUE}).then(() => tell('c stored'), (err) => tell('c failed ' + err.code));
    await lines.next();
    await store.set('renew', 'd.example', ${DUE}).then(() => tell('d stored'), (err) => tell('d failed ' + err.code));
    await store.close();
    process.exit(0);
  `;
  const child = spawn('env', ['-u', 'NODE_OPTIONS', process.execPath, '--input-type=module', '-e', script], { stdio: ['pipe', 'pipe', 'inherit'] });
  const said = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const next = async () => String((await said.next()).value);
  t.equal(await next(), 'ready');
  const folder = path.join(dataDir, 'schedule');
  const [file] = readdirSync(folder).filter((name) => !name.startsWith('.') && !name.includes('done'));
  const size = statSync(path.join(folder, file)).size;
  // room for 10 more bytes: c's line (about 60) is cut short by the kernel, then refused
  execFileSync('prlimit', ['--pid', String(child.pid), `--fsize=${size + 10}:`]);
  child.stdin!.write('go\n');
  t.equal(await next(), 'c failed STATE_UNAVAILABLE', 'the torn append fails as unavailable state');
  t.equal(statSync(path.join(folder, file)).size, size, 'and is cut back off the file');
  execFileSync('prlimit', ['--pid', String(child.pid), '--fsize=unlimited:']);
  child.stdin!.write('go\n');
  t.equal(await next(), 'd stored');
  await new Promise((resolve) => child.once('exit', resolve));

  const store = openEmbeddedSchedule(dataDir);
  t.teardown(() => store.close());
  const due = await store.claim(DUE + 1, 10, 60_000);
  t.same(due.map((job) => job.key).sort(), ['a.example', 'b.example', 'd.example'], 'a, b and d are due after a restart; c was never stored');
});
