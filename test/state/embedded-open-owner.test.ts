// Regression test for a tester's finding: a data dir whose files belong to another user (a first start
// as root, the dir opened to everyone, the next start as a service user) stopped the start with
// "portico: EACCES: permission denied, open '…/state.log'". Now the message names the data dir
// (PORTICO_DATA_DIR) and the fix (chown), and the fix is checked by doing it. Real `portico serve`
// processes; root is needed to make files of another user.
import t from 'tap';
import { chmodSync } from 'node:fs';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { cleanup, spawnPortico, tempDir } from '../helpers/portico.ts';
import { serveOnce } from '../helpers/serve-once.ts';

const NOBODY = 65534;

const serveAsNobody = (env: Record<string, string>) => serveOnce(env, NOBODY);

const asRoot = process.getuid?.() === 0;

for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
  t.test(`issue: a data dir of another user (the first start as root ended by ${signal}) read "EACCES … state.log"`, { skip: !asRoot && 'needs root to make files of another user' }, async (t) => {
    const dataDir = tempDir('data');
    const certsDir = tempDir('certs');
    t.teardown(() => cleanup(dataDir, certsDir));
    const first = await spawnPortico({ PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: certsDir });
    await first.kill(signal);
    chmodSync(dataDir, 0o777);
    // the certs dir is not the subject: one nobody may use
    const nobodyCerts = tempDir('certs');
    chmodSync(nobodyCerts, 0o777);
    t.teardown(() => cleanup(nobodyCerts));

    const run = await serveAsNobody({ PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: nobodyCerts });
    t.equal(run.code, 1, run.output.slice(-500));
    const stderr = run.output.split('\n').filter((line) => line.startsWith('portico: '));
    t.equal(stderr.length, 1, 'one line on stderr');
    t.match(stderr[0], `portico: the data dir ${dataDir} (PORTICO_DATA_DIR) holds files this process (user nobody, uid ${NOBODY}) may not open; they must belong to the user running Portico: chown -R nobody ${dataDir}`);
    t.match(stderr[0], new RegExp(`EACCES: permission denied, open '${dataDir}/`), 'and the file that could not be opened');

    // the fix said
    const chown = spawn('chown', ['-R', 'nobody', dataDir], { stdio: 'inherit' });
    t.equal(await new Promise((resolve) => chown.once('exit', resolve)), 0);
    const fixed = await serveAsNobody({ PORTICO_DATA_DIR: dataDir, PORTICO_CERTS_DIR: nobodyCerts });
    t.equal(fixed.code, 'listening', fixed.output.slice(-500));
  });
}
