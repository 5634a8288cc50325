// The durable log under the embedded state (DESIGN §8): real files in temp dirs, reopened the way a
// restarted process would, with the damage a crash (torn tail) or a bad disk (any complete line) leaves.
import t, { type Test } from 'tap';
import { appendFileSync, existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { AppendLog } from '../../src/state/append-log.ts';
import { cleanup, tempDir } from '../helpers/portico.ts';

function logFile(t: Test): string {
  const dir = tempDir('append-log');
  t.teardown(() => cleanup(dir));
  return path.join(dir, 'state.log');
}

/** Opens the log and returns it with every record replayed, in order. */
async function openLog(file: string): Promise<{ log: AppendLog; records: unknown[] }> {
  const records: unknown[] = [];
  const log = await AppendLog.open(file, (record) => records.push(record));
  return { log, records };
}

async function replayOnly(file: string): Promise<unknown[]> {
  const { log, records } = await openLog(file);
  await log.close();
  return records;
}

t.test('a missing file opens empty and is created', async (t) => {
  const file = logFile(t);
  const { log, records } = await openLog(file);
  t.strictSame(records, []);
  t.equal(log.records, 0);
  t.ok(existsSync(file), 'the file exists after open');
  await log.close();
});

t.test('records replay in order after reopen', async (t) => {
  const file = logFile(t);
  const written = [
    { op: 'put', t: 'accounts', k: 'acct_1', v: { plan: 'free' } },
    { op: 'seq', n: 'category:production', v: 1 },
    'a string',
    42,
    null,
    [1, 'two', { three: 3 }],
    { unicode: 'Grüße 🐕 — ok', newline: 'a\nb' },
  ];
  const { log } = await openLog(file);
  for (const record of written) await log.append(record);
  t.equal(log.records, written.length);
  await log.close();

  const again = await openLog(file);
  t.strictSame(again.records, written);
  t.equal(again.log.records, written.length, 'records counts what was replayed');
  // one line per record, newline-terminated
  const lines = readFileSync(file, 'utf8').split('\n');
  t.equal(lines.length, written.length + 1);
  t.equal(lines.at(-1), '');
  await again.log.append({ after: 'reopen' });
  await again.log.close();
  t.strictSame(await replayOnly(file), [...written, { after: 'reopen' }]);
});

t.test('200 concurrent appends all resolve, share fsyncs and all replay', async (t) => {
  const file = logFile(t);
  const { log } = await openLog(file);
  // count fdatasync calls on the log's file handle: group commit means one serves many appends
  const handle = (log as unknown as { handle: FileHandle }).handle;
  let syncs = 0;
  const datasync = handle.datasync.bind(handle);
  handle.datasync = () => {
    syncs++;
    return datasync();
  };
  const settled = await Promise.allSettled(Array.from({ length: 200 }, (_, i) => log.append({ i })));
  t.equal(settled.filter((s) => s.status === 'fulfilled').length, 200, 'every append resolved');
  t.equal(log.records, 200);
  t.ok(syncs >= 1 && syncs <= 5, `200 appends took ${syncs} fdatasync calls`);
  await log.close();
  t.strictSame(await replayOnly(file), Array.from({ length: 200 }, (_, i) => ({ i })));
});

t.test('an append resolves only once its record is on disk', async (t) => {
  const file = logFile(t);
  const { log } = await openLog(file);
  await log.append({ durable: 1 });
  // read by another path while the log is still open: the record is there already
  t.match(readFileSync(file, 'utf8'), /^[0-9a-f]{8} \{"durable":1\}\n$/);
  await log.close();
});

t.test('a torn tail: a partial last line is cut and the log stays usable', async (t) => {
  const file = logFile(t);
  const { log } = await openLog(file);
  await log.append({ n: 1 });
  await log.append({ n: 2 });
  await log.close();
  const goodSize = statSync(file).size;
  appendFileSync(file, '1a2b3c4d {"n":3,"half');

  const reopened = await openLog(file);
  t.strictSame(reopened.records, [{ n: 1 }, { n: 2 }]);
  t.equal(reopened.log.records, 2);
  t.equal(statSync(file).size, goodSize, 'the torn bytes were truncated');
  await reopened.log.append({ n: 3 });
  await reopened.log.close();
  t.strictSame(await replayOnly(file), [{ n: 1 }, { n: 2 }, { n: 3 }]);
});

// Regression: a complete last line with a wrong checksum was taken for a torn write and cut off at
// start, silently: an acknowledged record (one flipped byte on disk) was gone. A crash leaves a prefix
// of a line, never a whole one with its newline; a whole bad line is damage, wherever it is.
t.test('a complete last line with a wrong checksum is damage: the start is refused, the file left as it was', async (t) => {
  const file = logFile(t);
  const { log } = await openLog(file);
  await log.append({ n: 1 });
  await log.append({ n: 2 });
  await log.append({ name: 'cat' });
  await log.close();
  const before = readFileSync(file, 'utf8');
  const lastStart = before.lastIndexOf('\n', before.length - 2) + 1;
  // one byte flipped inside the last record; its newline is still there
  const damaged = before.slice(0, lastStart) + before.slice(lastStart).replace('"cat"', '"Xat"');
  writeFileSync(file, damaged);

  await t.rejects(openLog(file), {
    message: `${file}: line 3 (byte offset ${Buffer.byteLength(before.slice(0, lastStart))}) is damaged (checksum mismatch); refusing to start rather than drop a record. Restore the file from a backup, or delete that line by hand if losing its record is acceptable`,
  });
  t.equal(readFileSync(file, 'utf8'), damaged, 'nothing was truncated');
});

t.test('a bad complete line followed by a partial one is damage too', async (t) => {
  const file = logFile(t);
  const { log } = await openLog(file);
  await log.append({ n: 1 });
  await log.close();
  appendFileSync(file, 'ffffffff {"n":2}\n0badc0de {"n"');
  await t.rejects(openLog(file), /state\.log: line 2 \(byte offset 17\) is damaged \(checksum mismatch\)/);
});

t.test('a last record whose newline was damaged is damage, not a torn write', async (t) => {
  const file = logFile(t);
  const { log } = await openLog(file);
  await log.append({ n: 1 });
  await log.append({ n: 2 });
  await log.close();
  const text = readFileSync(file, 'utf8');
  writeFileSync(file, `${text.slice(0, -1)}\u000b`);
  await t.rejects(openLog(file), /line 2 \(byte offset 17\) is damaged \(its newline is damaged\)/);
});

t.test('a torn tail is reported with its size and offset', async (t) => {
  const file = logFile(t);
  const { log } = await openLog(file);
  await log.append({ n: 1 });
  await log.close();
  // a whole record without its newline was never acknowledged (the newline is written with it)
  appendFileSync(file, readFileSync(file, 'utf8').slice(0, -1));
  const told: Array<[number, number]> = [];
  const records: unknown[] = [];
  const reopened = await AppendLog.open(file, (r) => records.push(r), { onTornTail: (bytes, offset) => told.push([bytes, offset]) });
  await reopened.close();
  t.strictSame(records, [{ n: 1 }]);
  t.strictSame(told, [[16, 17]], '16 bytes cut at offset 17');
  t.equal(statSync(file).size, 17);
});

t.test('a file holding only a torn record opens empty', async (t) => {
  const file = logFile(t);
  writeFileSync(file, '12345678 {"never":"acknowledged"');
  const { log, records } = await openLog(file);
  t.strictSame(records, []);
  t.equal(statSync(file).size, 0);
  await log.append({ first: true });
  await log.close();
  t.strictSame(await replayOnly(file), [{ first: true }]);
});

t.test('damage before the tail is refused, and the file is left as it was', async (t) => {
  const file = logFile(t);
  const { log } = await openLog(file);
  for (let n = 1; n <= 4; n++) await log.append({ n });
  await log.close();
  // flip one character of record 2's JSON: its checksum no longer matches, and good lines follow
  const lines = readFileSync(file, 'utf8').split('\n');
  lines[1] = lines[1].replace('"n":2', '"n":7');
  const damaged = lines.join('\n');
  writeFileSync(file, damaged);

  const applied: unknown[] = [];
  await t.rejects(AppendLog.open(file, (r) => applied.push(r)), {
    message: `${file}: line 2 (byte offset 17) is damaged (checksum mismatch); refusing to start rather than drop a record. Restore the file from a backup, or delete that line by hand if losing its record is acceptable`,
  });
  t.equal(readFileSync(file, 'utf8'), damaged, 'nothing was truncated or rewritten');
  // the refusal is stable: a second attempt refuses the same way
  await t.rejects(AppendLog.open(file, () => undefined), /line 2 \(byte offset 17\) is damaged/);
});

t.test('a line that is not a record at all, before good ones, is refused', async (t) => {
  const file = logFile(t);
  const { log } = await openLog(file);
  await log.append({ n: 1 });
  await log.close();
  appendFileSync(file, 'not a log line\n');
  const next = await openLog(path.join(path.dirname(file), 'other.log'));
  await next.log.append({ n: 2 });
  await next.log.close();
  appendFileSync(file, readFileSync(path.join(path.dirname(file), 'other.log')));

  await t.rejects(AppendLog.open(file, () => undefined), /line 2 \(byte offset 17\) is damaged \(not a log record\); refusing to start/);
});

t.test('compaction rewrites the file to the snapshot; later appends land and replay', async (t) => {
  const file = logFile(t);
  const { log } = await openLog(file);
  for (let n = 1; n <= 10; n++) await log.append({ n });
  t.equal(log.records, 10);

  const snapshot = [{ snap: 'a' }, { snap: 'b' }];
  let snapshots = 0;
  log.requestCompaction(() => {
    snapshots++;
    return snapshot;
  });
  await log.append({ after: 1 });
  t.equal(snapshots, 1, 'the snapshot was taken once');
  t.equal(log.records, 3, 'records restarts from the snapshot');
  const lines = readFileSync(file, 'utf8').split('\n').filter(Boolean);
  t.equal(lines.length, 3, 'the file holds the snapshot and the later append only');
  t.notOk(existsSync(`${file}.compact`), 'no temp file is left behind');

  await log.append({ after: 2 });
  await log.close();
  t.strictSame(await replayOnly(file), [{ snap: 'a' }, { snap: 'b' }, { after: 1 }, { after: 2 }]);
});

t.test('compaction requested while appends are in flight loses none of them', async (t) => {
  const file = logFile(t);
  const { log } = await openLog(file);
  // the owner's state, updated before each append the way Tables does
  const state = new Map<number, number>();
  const put = (k: number, v: number) => {
    state.set(k, v);
    return log.append({ k, v });
  };
  const first = Array.from({ length: 60 }, (_, i) => put(i % 20, i));
  log.requestCompaction(() => [...state].map(([k, v]) => ({ k, v })));
  const second = Array.from({ length: 60 }, (_, i) => put(i % 30, 100 + i));
  await Promise.all([...first, ...second]);
  await log.close();

  const replayed = new Map<number, number>();
  for (const r of await replayOnly(file)) {
    const { k, v } = r as { k: number; v: number };
    replayed.set(k, v);
  }
  t.strictSame([...replayed].sort((a, b) => a[0] - b[0]), [...state].sort((a, b) => a[0] - b[0]));
  t.equal(state.size, 30);
});

t.test('compaction right after a batch keeps what its writers apply once it is acknowledged (they apply it after the fsync)', async (t) => {
  const file = logFile(t);
  const { log } = await openLog(file);
  // the owner's state, updated once each append is durable, the way Tables and the domain index do
  const state = new Map<number, number>();
  const put = async (k: number, v: number) => {
    await log.append({ k, v });
    state.set(k, v);
  };
  const writes = Array.from({ length: 40 }, (_, i) => put(i, i));
  log.requestCompaction(() => [...state].map(([k, v]) => ({ k, v })));
  await Promise.all(writes);
  await log.close();

  const replayed = new Map<number, number>();
  for (const r of await replayOnly(file)) {
    const { k, v } = r as { k: number; v: number };
    replayed.set(k, v);
  }
  t.equal(replayed.size, 40, 'every acknowledged record is in the compacted log');
});

t.test('a compacted log survives reopen and compacting again', async (t) => {
  const file = logFile(t);
  const { log } = await openLog(file);
  for (let n = 1; n <= 5; n++) await log.append({ n });
  log.requestCompaction(() => [{ total: 5 }]);
  await log.close();
  t.strictSame(await replayOnly(file), [{ total: 5 }], 'close waits for a requested compaction');

  const again = await openLog(file);
  await again.log.append({ n: 6 });
  again.log.requestCompaction(() => [{ total: 6 }]);
  await again.log.append({ n: 7 });
  await again.log.close();
  t.strictSame(await replayOnly(file), [{ total: 6 }, { n: 7 }]);
});
