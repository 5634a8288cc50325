// Regression: one failed write to the data dir (a full disk) made every later embedded write fail with
// 500 until a restart, also once the disk had room again, and /readyz said 200 throughout. Now a change
// that cannot be made durable is 503 with Retry-After and is not applied (not after a restart either),
// the failed bytes are cut off the log at once, /readyz is 503 while writes fail, and writing resumes
// by itself. Two real faults on a real Portico process:
// - a file size limit (RLIMIT_FSIZE, set on the running process with prlimit: any user may lower it
//   and raise it back). A write crossing it is cut short by the kernel, then fails with EFBIG: a torn
//   record. The kernel also sends SIGXFSZ, which Node ignores; tap's process hooks (put into every
//   child's NODE_OPTIONS, with signal-exit) turn it back into an exit, so this Portico runs without
//   them, as it does in service.
// - a full tmpfs (ENOSPC), when the test may mount one (root); skipped otherwise.
import t, { type Test } from 'tap';
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createInterface } from 'node:readline';
import { baseEnv, spawnPortico, cleanup, tempDir, type Child } from '../helpers/portico.ts';
import { admin, type Answer } from '../helpers/client.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** `portico serve` without tap's hooks (tap adds them to the environment of every child it sees spawned) */
async function spawnWithoutHooks(env: Record<string, string>): Promise<Child> {
  const full = baseEnv(env);
  const child = spawn('env', ['-u', 'NODE_OPTIONS', process.execPath, path.join(ROOT, 'src/cli/main.ts'), 'serve'], { env: { ...process.env, ...full }, stdio: ['ignore', 'pipe', 'pipe'] });
  const logs: string[] = [];
  createInterface({ input: child.stderr! }).on('line', (line) => logs.push(line));
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  const ports = await new Promise<Child['ports']>((resolve, reject) => {
    exited.then((code) => reject(new Error(`portico exited with ${code}:\n${logs.join('\n')}`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      logs.push(line);
      if (line.includes('"msg":"Portico listening')) resolve(JSON.parse(line));
    });
  });
  return {
    process: child,
    ports,
    ca: '',
    env: full,
    logs,
    exited,
    async kill(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

const createAccount = (child: Child) => admin(child.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' });
const readyz = (child: Child) => admin(child.ports.admin, 'GET', '/readyz', undefined, null);

/** the account records in state.log (a 503 must have left none) */
const accountRecords = (dataDir: string) => readFileSync(path.join(dataDir, 'state.log'), 'utf8').split('\n').filter((line) => line.includes('"t":"accounts"')).length;

const logged = (child: Child, text: string) => child.logs.filter((line) => line.includes(text));

async function until(what: string, probe: () => Promise<boolean>, ms = 5000): Promise<number> {
  const started = performance.now();
  while (!(await probe())) {
    if (performance.now() - started > ms) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(50);
  }
  return performance.now() - started;
}

function refusedAsUnavailable(t: Test, answer: Answer, what: string): void {
  t.equal(answer.status, 503, `${what}: 503`);
  t.equal(answer.json?.code, 'service_unavailable', `${what}: service_unavailable`);
  t.match(answer.headers['retry-after'], /^\d+$/, `${what}: Retry-After`);
}

/** Portico on `dataDir` again, after the first one is gone: every acknowledged account is there */
async function restartAndCheck(t: Test, dataDir: string, acknowledged: string[]): Promise<void> {
  const again = await spawnPortico({ PORTICO_DATA_DIR: dataDir });
  t.teardown(() => again.kill('SIGKILL'));
  for (const id of acknowledged) t.equal((await admin(again.ports.admin, 'GET', `/admin/accounts/${id}`)).status, 200, `acknowledged ${id} is there after the restart`);
  t.equal(accountRecords(dataDir), acknowledged.length, 'the log holds the acknowledged accounts and none of those answered 503');
  t.same(logged(again, 'cut off an incomplete last record'), [], 'the restart found a clean log: nothing to cut off');
  t.equal((await readyz(again)).status, 200);
}

t.test('a file size limit (EFBIG, a short write first): 503 and nothing torn left; writes resume when the limit goes', async (t) => {
  const dataDir = tempDir('disk-faults');
  t.teardown(() => cleanup(dataDir));
  const portico = await spawnWithoutHooks({ PORTICO_DATA_DIR: dataDir });
  t.teardown(() => portico.kill('SIGKILL'));
  const pid = String(portico.process.pid);

  const acknowledged: string[] = [];
  for (let i = 0; i < 3; i++) {
    const created = await createAccount(portico);
    t.equal(created.status, 201);
    acknowledged.push(created.json.id);
  }
  t.same((await readyz(portico)).json, { status: 'ok', state: 'embedded' });

  // room for 40 more bytes in any file: the next record (about 150) is cut short, then refused
  const size = statSync(path.join(dataDir, 'state.log')).size;
  execFileSync('prlimit', ['--pid', pid, `--fsize=${size + 40}:`]);
  for (let i = 0; i < 5; i++) refusedAsUnavailable(t, await createAccount(portico), `write ${i + 1} past the limit`);
  t.equal(statSync(path.join(dataDir, 'state.log')).size, size, 'the torn record was cut off the log at once');
  const notReady = await readyz(portico);
  t.equal(notReady.status, 503, '/readyz 503 while writes fail');
  t.match(notReady.json, { status: 'unavailable', state: 'embedded' });
  await until('the failure is logged', async () => logged(portico, 'writes to the data dir fail').length > 0, 2000);
  t.equal(logged(portico, 'writes to the data dir fail').length, 1, 'one line when writes start failing');
  t.equal(logged(portico, 'the data dir takes writes again').length, 0);

  // the limit goes; nothing is asked of Portico until it has logged that it noticed by itself
  execFileSync('prlimit', ['--pid', pid, '--fsize=unlimited:']);
  const ms = await until('the recovery is logged', async () => logged(portico, 'the data dir takes writes again').length > 0);
  t.pass(`noticed without a request, ${ms.toFixed(0)} ms after the limit was raised`);
  t.same((await readyz(portico)).json, { status: 'ok', state: 'embedded' }, '/readyz 200 again');
  t.equal(logged(portico, 'the data dir takes writes again').length, 1, 'one line when writes succeed again');
  const after = await createAccount(portico);
  t.equal(after.status, 201, 'writes work again without a restart');
  acknowledged.push(after.json.id);

  await portico.kill('SIGKILL');
  await restartAndCheck(t, dataDir, acknowledged);
});

/** a 2 MB tmpfs on `dir`, or why there cannot be one */
function mountTmpfs(dir: string): string | null {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', dir], { stdio: 'pipe' });
    return null;
  } catch (err) {
    return `cannot mount a tmpfs here (it needs root): ${(err as Error).message.split('\n')[0]}; the file size limit case covers the same code`;
  }
}

const mountPoint = tempDir('disk-full');
const cannotMount = mountTmpfs(mountPoint);
t.teardown(() => {
  if (!cannotMount) execFileSync('umount', ['-l', mountPoint]);
  cleanup(mountPoint);
});

t.test('a full disk (tmpfs, ENOSPC): 503 while full, writes resume once there is room', { skip: cannotMount ?? false }, async (t) => {
  const dataDir = path.join(mountPoint, 'data');
  mkdirSync(dataDir);
  const portico = await spawnPortico({ PORTICO_DATA_DIR: dataDir });
  t.teardown(() => portico.kill('SIGKILL'));

  const acknowledged: string[] = [];
  const first = await createAccount(portico);
  t.equal(first.status, 201);
  acknowledged.push(first.json.id);

  // fill the disk to its last page
  const filler = path.join(mountPoint, 'filler');
  const fd = openSync(filler, 'w');
  for (const chunk of [65536, 4096]) {
    try {
      for (;;) writeSync(fd, Buffer.alloc(chunk));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
    }
  }
  closeSync(fd);

  // a record may still fit into the free bytes of the log's last page; then none does
  let refused = 0;
  for (let i = 0; i < 60 && refused < 5; i++) {
    const answer = await createAccount(portico);
    if (answer.status === 201) acknowledged.push(answer.json.id);
    else {
      refusedAsUnavailable(t, answer, `write ${i + 1} on a full disk`);
      refused++;
    }
  }
  t.equal(refused, 5, 'writes on a full disk are refused with 503');
  const notReady = await readyz(portico);
  t.equal(notReady.status, 503, '/readyz 503 while the disk is full');
  t.match(notReady.json, { status: 'unavailable', state: 'embedded' });
  await until('the failure is logged', async () => logged(portico, 'writes to the data dir fail').length > 0, 2000);
  t.equal(logged(portico, 'writes to the data dir fail').length, 1, 'one line when writes start failing');

  rmSync(filler);
  const ms = await until('/readyz 200 again', async () => (await readyz(portico)).status === 200);
  t.pass(`/readyz 200 ${ms.toFixed(0)} ms after the disk had room again`);
  await until('the recovery is logged', async () => logged(portico, 'the data dir takes writes again').length === 1, 2000);
  const after = await createAccount(portico);
  t.equal(after.status, 201, 'writes work again without a restart');
  acknowledged.push(after.json.id);

  await portico.kill('SIGTERM');
  await restartAndCheck(t, dataDir, acknowledged);
});
