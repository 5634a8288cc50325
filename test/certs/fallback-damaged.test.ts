// Regression tests for a tester's finding: a damaged fallback certificate or key stopped the start
// with OpenSSL's "error:0480006C:PEM routines::no start line", naming neither the file nor the fix.
// Now the start names the file and says that deleting both files makes a new pair, which is checked
// by doing it. Also: fallback files of another user (a first start as root) name the certs dir and
// chown. Real `portico serve` processes.
import t, { type Test } from 'tap';
import { chmodSync, copyFileSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { cleanup, tempDir } from '../helpers/portico.ts';
import { serveOnce as serve } from '../helpers/serve-once.ts';

/** The certs dir of a first start, with its fallback pair; a fresh data dir per start. */
async function firstStart(t: Test) {
  const certsDir = tempDir('certs');
  const dataDirs = [tempDir('data')];
  t.teardown(() => cleanup(certsDir, ...dataDirs));
  const first = await serve({ PORTICO_DATA_DIR: dataDirs[0], PORTICO_CERTS_DIR: certsDir });
  t.equal(first.code, 'listening', first.output);
  const crt = path.join(certsDir, 'fallback.crt');
  const key = path.join(certsDir, 'fallback.key');
  return {
    certsDir,
    crt,
    key,
    start: (uid?: number) => {
      const dataDir = tempDir('data');
      dataDirs.push(dataDir);
      if (uid !== undefined) chmodSync(dataDir, 0o777);
      return serve({ PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir }, uid);
    },
  };
}

const fix = (certsDir: string) => `delete both fallback.crt and fallback.key in ${certsDir} (PORTICO_CERTS_DIR) and Portico makes a new pair at the next start`;

t.test('issue: a damaged fallback certificate or key stopped the start with "PEM routines::no start line"', async (t) => {
  const { certsDir, crt, key, start } = await firstStart(t);
  const good = { crt: readFileSync(crt, 'utf8'), key: readFileSync(key, 'utf8') };
  const restore = () => {
    writeFileSync(crt, good.crt);
    writeFileSync(key, good.key);
  };
  const other = tempDir('other-certs');
  const otherData = tempDir('data');
  t.teardown(() => cleanup(other, otherData));
  const made = await serve({ PORTICO_DATA_DIR: otherData, PORTICO_CERTS_DIR: other });
  t.equal(made.code, 'listening', made.output);
  const cases: Array<[string, () => void, string]> = [
    ['junk in fallback.crt', () => writeFileSync(crt, 'junk\n'), `the fallback certificate ${crt} is damaged: not a PEM certificate`],
    ['junk in fallback.key', () => writeFileSync(key, 'junk\n'), `the fallback key ${key} is damaged: not a PEM private key`],
    ['the certificate copied over the key', () => copyFileSync(crt, key), `the fallback key ${key} is damaged: not a PEM private key`],
    ['the key of another certificate', () => writeFileSync(key, readFileSync(path.join(other, 'fallback.key'))), `the fallback key ${key} is not the key of ${crt}`],
  ];
  for (const [name, damage, message] of cases) {
    restore();
    damage();
    const run = await start();
    t.equal(run.code, 1, `${name}: the start stops (${run.output.slice(-300)})`);
    const stderr = run.output.split('\n').filter((line) => line.startsWith('portico: '));
    t.equal(stderr.length, 1, `${name}: one line on stderr`);
    t.match(stderr[0], `portico: ${message}`, `${name}: names the file`);
    t.match(stderr[0], fix(certsDir), `${name}: and the fix`);
  }

  // the fix said: both gone, the next start makes a new pair and serves
  rmSync(crt);
  rmSync(key);
  const fixed = await start();
  t.equal(fixed.code, 'listening', fixed.output);
  t.match(fixed.output, /created the fallback certificate for localhost/);
  t.ok(existsSync(crt) && existsSync(key), 'a new pair is on disk');
  t.not(readFileSync(key, 'utf8'), good.key, 'with a new key');
});

t.test('issue: fallback files of another user stopped the start with a raw EACCES', { skip: process.getuid?.() !== 0 && 'needs root to make files of another user' }, async (t) => {
  // the first start as root made the files; the certs dir opened to everyone, the next start as nobody
  const { certsDir, key, start } = await firstStart(t);
  chmodSync(certsDir, 0o777);
  const run = await start(65534);
  t.equal(run.code, 1, run.output.slice(-500));
  t.match(run.output, `portico: cannot read ${key}: the files of the certs dir ${certsDir} (PORTICO_CERTS_DIR) must belong to the user running Portico (nobody): chown -R nobody ${certsDir}`);

  // the fix said
  const chown = spawn('chown', ['-R', 'nobody', certsDir], { stdio: 'inherit' });
  t.equal(await new Promise((resolve) => chown.once('exit', resolve)), 0);
  const fixed = await start(65534);
  t.equal(fixed.code, 'listening', fixed.output);
});
