// The HTTP/1.1 upstream client against llhttp (Node's own parser, strict) on generated answers: the
// same verdict for each — accepted with the same status, header fields and body bytes, or refused —
// except where Portico refuses on purpose what llhttp takes (Generated.stricter). Portico reads each
// answer from a real loopback upstream that writes the bytes (split where the generator says) and
// closes; llhttp reads the same parts. PORTICO_DIFF_SEED and PORTICO_DIFF_COUNT repeat or widen a run.
import t from 'tap';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { setImmediate as tick } from 'node:timers/promises';
import { createHttp1Client } from '../../src/proxy/http1-client.ts';
import { llhttpVerdict, porticoVerdict } from '../helpers/llhttp-reference.ts';
import { generate, random, type Generated } from '../helpers/upstream-answers.ts';

const SEED = Number(process.env.PORTICO_DIFF_SEED ?? Math.floor(Math.random() * 2 ** 31));
const COUNT = Number(process.env.PORTICO_DIFF_COUNT ?? 3000);

/** one connection per answer: the next accepted socket gets the next queued answer, then the close */
async function upstream(): Promise<{ origin: string; queue: (g: Generated) => void; close: () => Promise<void> }> {
  const pending: Generated[] = [];
  const server = net.createServer((socket) => {
    socket.on('error', () => undefined);
    const answer = pending.shift();
    let seen = '';
    const onData = async (chunk: Buffer) => {
      seen += chunk.toString('latin1');
      if (!seen.includes('\r\n\r\n') || answer === undefined) return;
      socket.off('data', onData);
      let from = 0;
      for (const at of answer.splits) {
        socket.write(answer.bytes.subarray(from, at));
        from = at;
        await tick();
      }
      socket.end(answer.bytes.subarray(from));
    };
    socket.on('data', onData);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    queue: (g) => pending.push(g),
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

function parts(g: Generated): Buffer[] {
  const out: Buffer[] = [];
  let from = 0;
  for (const at of g.splits) {
    out.push(g.bytes.subarray(from, at));
    from = at;
  }
  out.push(g.bytes.subarray(from));
  return out;
}

t.test(`Portico's client and llhttp agree on ${COUNT} generated answers (seed ${SEED})`, async (t) => {
  const server = await upstream();
  // idleMs 0: no connection is reused, so each answer meets a fresh one, as the upstream expects
  const client = createHttp1Client({ timeoutMs: 5_000, connectTimeoutMs: 2_000, maxConnections: 1, idleMs: 0 });
  t.teardown(async () => {
    client.close();
    await server.close();
  });
  const rand = random(SEED);
  const tally = { accepted: 0, refused: 0, stricter: 0 };
  const mismatches: string[] = [];
  for (let i = 0; i < COUNT; i++) {
    const g = generate(rand);
    const reference = llhttpVerdict(parts(g), g.method);
    server.queue(g);
    const ours = await porticoVerdict(client, server.origin, g.method, '/');
    const same = JSON.stringify(ours) === JSON.stringify(reference) || (!ours.accepted && !reference.accepted);
    if (same) tally[ours.accepted ? 'accepted' : 'refused']++;
    else if (!ours.accepted && reference.accepted && g.stricter !== null) tally.stricter++;
    else mismatches.push(`#${i} ${g.method} ${JSON.stringify(g.bytes.toString('latin1'))} splits ${JSON.stringify(g.splits)}\n  Portico: ${JSON.stringify(ours)}\n  llhttp:  ${JSON.stringify(reference)}`);
    if (mismatches.length >= 10) break;
  }
  t.same(mismatches, [], `seed ${SEED}: rerun with PORTICO_DIFF_SEED=${SEED}`);
  t.comment(`seed ${SEED}: ${tally.accepted} accepted alike, ${tally.refused} refused alike, ${tally.stricter} refused by Portico only (on purpose)`);
  // the generator must reach both verdicts often, or the comparison says little
  t.ok(tally.accepted > COUNT / 10 && tally.refused > COUNT / 10, `both verdicts are common (${JSON.stringify(tally)})`);
});
