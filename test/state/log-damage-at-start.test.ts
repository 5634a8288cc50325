// Regression: one flipped byte inside the last record of state.log (the line still ends in its
// newline) and Portico started, logged nothing and had dropped the record, an acknowledged write: the
// last bad line was taken for a write torn by a crash. A crash leaves an incomplete line, never a whole
// one; a whole line that does not check out is damage and stops the start, as damage anywhere else
// does, in state.log and in domains.log. A torn tail is still cut off, and now says so.
import t, { type Test } from 'tap';
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { startPortico, spawnPortico, cleanup, tempDir } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';

/** a data dir holding two accounts, a project and two domains, written by a Portico that stopped cleanly */
async function dataDirWithRecords(t: Test): Promise<{ dataDir: string; accounts: string[] }> {
  const dataDir = tempDir('log-damage');
  t.teardown(() => cleanup(dataDir));
  const portico = await startPortico({ PORTICO_DATA_DIR: dataDir });
  const accounts: string[] = [];
  for (const plan of ['free', 'pro']) accounts.push((await admin(portico.ports.admin, 'POST', '/admin/accounts', { plan })).json.id);
  const project = await admin(portico.ports.admin, 'POST', '/admin/projects', { accountId: accounts[1], name: 'shop', upstream: 'http://127.0.0.1:9' });
  t.equal(project.status, 201);
  for (const hostname of ['a.example.com', 'b.example.com']) t.equal((await admin(portico.ports.admin, 'POST', `/admin/projects/${project.json.id}/domains`, { hostname })).status, 201);
  await portico.stop();
  return { dataDir, accounts };
}

/** flips one character inside the JSON of the file's last line, keeping its newline */
function flipInLastLine(t: Test, file: string): { line: number; offset: number } {
  const text = readFileSync(file, 'utf8');
  const lines = text.split('\n');
  t.equal(lines.at(-1), '', `${path.basename(file)} ends with a newline`);
  const last = lines.length - 2;
  const at = lines[last].length - 3;
  lines[last] = lines[last].slice(0, at) + (lines[last][at] === 'x' ? 'y' : 'x') + lines[last].slice(at + 1);
  writeFileSync(file, lines.join('\n'));
  return { line: last + 1, offset: Buffer.byteLength(lines.slice(0, last).join('\n')) + 1 };
}

for (const name of ['state.log', 'domains.log']) {
  t.test(`a flipped byte in the last record of ${name} stops the start, naming the file, line and offset`, async (t) => {
    const { dataDir } = await dataDirWithRecords(t);
    const file = path.join(dataDir, name);
    const { line, offset } = flipInLastLine(t, file);
    const damaged = readFileSync(file, 'utf8');
    const refused = await spawnPortico({ PORTICO_DATA_DIR: dataDir }).then(
      async (child) => {
        await child.kill('SIGKILL');
        return null;
      },
      (err: Error) => err.message,
    );
    t.ok(refused, 'Portico did not start');
    t.match(refused, /exited with [1-9]\d* before listening/, 'it exited non-zero');
    t.match(refused, `${file}: line ${line} (byte offset ${offset}) is damaged (checksum mismatch); refusing to start rather than drop a record`);
    t.equal(readFileSync(file, 'utf8'), damaged, 'the file is left as it was');
  });
}

t.test('an incomplete last line of state.log (a crash mid-write) is cut off and logged; what was acknowledged stays', async (t) => {
  const { dataDir, accounts } = await dataDirWithRecords(t);
  const file = path.join(dataDir, 'state.log');
  const size = readFileSync(file).length;
  appendFileSync(file, '1a2b3c4d {"op":"put","t":"accounts","k":"acc_torn","v":{"pl');
  const portico = await startPortico({ PORTICO_DATA_DIR: dataDir });
  t.teardown(() => portico.stop());
  for (const id of accounts) t.equal((await admin(portico.ports.admin, 'GET', `/admin/accounts/${id}`)).status, 200, `${id} is there`);
  t.equal(readFileSync(file).length, size, 'the torn bytes are gone from the file');
  const told = portico.logs.map((line) => JSON.parse(line)).filter((entry) => entry.msg?.startsWith('cut off an incomplete last record'));
  t.match(told, [{ level: 40, file, bytes: 59, offset: size }], 'one warning with the file, the bytes cut and where');
});
