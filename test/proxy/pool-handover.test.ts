// Regression tests: a request waiting for a pooled connection took the bytes an upstream sent after its
// previous answer as its own. The upstream finished one answer and, in the same write, sent a whole
// second one (`X-Smuggled: yes`, `SMUGGLED`); the client read the two in one turn, the first read
// completed the exchange, the connection went at once to the waiting request, and the second read was
// parsed as that request's answer (another visitor's, another project's even). Now a connection is
// handed over only once everything read so far was the answer's: the bytes close it, and the waiting
// request goes up on a new connection. Real loopback upstreams, the pool at one connection per origin.
import t, { type Test } from 'tap';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { createHttp1Client, type HeaderList, type Http1Client, type Sink } from '../../src/proxy/http1-client.ts';

const SMUGGLED = 'HTTP/1.1 200 OK\r\nX-Smuggled: yes\r\nContent-Length: 8\r\n\r\nSMUGGLED';
const HONEST = 'HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nhonest';

interface Upstream {
  origin: string;
  /** per accepted connection, the request lines it carried */
  connections: string[][];
  /** per accepted connection: resolves when it closed */
  closed: Promise<void>[];
  /** the socket a request line came on, once it came */
  socketOf(line: string): Promise<net.Socket>;
}

/** A raw HTTP/1.1 upstream (requests without bodies); `answer` writes whatever it likes. */
async function upstream(t: Test, answer: (line: string, socket: net.Socket) => void): Promise<Upstream> {
  const connections: string[][] = [];
  const closed: Promise<void>[] = [];
  const arrived = new Map<string, net.Socket>();
  const notify = new EventEmitter();
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    const lines: string[] = [];
    connections.push(lines);
    sockets.add(socket);
    socket.on('error', () => undefined);
    closed.push(new Promise((resolve) => socket.once('close', () => {
      sockets.delete(socket);
      resolve();
    })));
    let buffered = '';
    socket.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('latin1');
      for (let end = buffered.indexOf('\r\n\r\n'); end !== -1; end = buffered.indexOf('\r\n\r\n')) {
        const line = buffered.slice(0, buffered.indexOf('\r\n'));
        buffered = buffered.slice(end + 4);
        lines.push(line);
        arrived.set(line, socket);
        notify.emit(line, socket);
        answer(line, socket);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    connections,
    closed,
    socketOf: (line) => {
      const socket = arrived.get(line);
      return socket ? Promise.resolve(socket) : new Promise((resolve) => notify.once(line, resolve));
    },
  };
}

/** A sink that keeps what it is given; `full` makes write() answer false until drain() */
class Collector extends EventEmitter implements Sink {
  chunks: Buffer[] = [];
  full = false;
  write(chunk: Buffer): boolean {
    this.chunks.push(Buffer.from(chunk));
    return !this.full;
  }
  end(chunk?: Buffer): void {
    if (chunk !== undefined) this.chunks.push(Buffer.from(chunk));
  }
  drain(): void {
    this.full = false;
    this.emit('drain');
  }
}

interface Received {
  status: number;
  headers: HeaderList;
  body: string;
}

function get(client: Http1Client, origin: string, path: string, sink = new Collector()): Promise<Received> {
  let status = 0;
  let headers: HeaderList = [];
  const call = client.request(origin, {
    head: `GET ${path} HTTP/1.1\r\n`,
    method: 'GET',
    body: null,
    onHead(code, fields) {
      status = code;
      headers = fields;
      return sink;
    },
  });
  return call.done.then(() => ({ status, headers, body: Buffer.concat(sink.chunks).toString('latin1') }));
}

function newClient(t: Test): Http1Client {
  // one connection per origin: the second request waits for the first's
  const client = createHttp1Client({ timeoutMs: 5_000, connectTimeoutMs: 2_000, maxConnections: 1 });
  t.teardown(() => client.close());
  return client;
}

/** an answer of exactly `size` bytes, head included: its last byte ends a 64 KiB read */
function answerOfSize(size: number): { bytes: Buffer; body: number } {
  const body = size - `HTTP/1.1 200 OK\r\nContent-Length: ${size}\r\n\r\n`.length;
  const head = `HTTP/1.1 200 OK\r\nContent-Length: ${body}\r\n\r\n`;
  if (head.length + body !== size) throw new Error(`no answer of ${size} bytes`);
  return { bytes: Buffer.concat([Buffer.from(head), Buffer.alloc(body, 'x')]), body };
}

/** the bytes read in one turn, as the reporter's probe: 64 KiB (one read, one answer), then the next answer */
t.test('an answer and a second one in the same write: the waiting request gets its own answer, on a new connection', async (t) => {
  const first = answerOfSize(65536);
  const server = await upstream(t, (line, socket) => {
    if (line === 'GET /queued HTTP/1.1') socket.write(HONEST);
  });
  const client = newClient(t);
  const held = get(client, server.origin, '/held');
  const socket = await server.socketOf('GET /held HTTP/1.1');
  // the waiting request: the pool's one connection is busy
  const queued = get(client, server.origin, '/queued');
  await sleep(50);
  t.same(server.connections, [['GET /held HTTP/1.1']], 'the second request waits for the connection');
  socket.write(Buffer.concat([first.bytes, Buffer.from(SMUGGLED)]));

  const answer = await queued;
  t.same(answer, { status: 200, headers: ['content-length', '6'], body: 'honest' }, 'the waiting request got exactly its own answer, nothing smuggled');
  const before = await held;
  t.equal(before.status, 200);
  t.equal(before.body, 'x'.repeat(first.body), 'the first answer whole');
  await server.closed[0];
  t.pass('the connection that carried the extra bytes was closed');
  t.same(server.connections, [['GET /held HTTP/1.1'], ['GET /queued HTTP/1.1']], 'the waiting request went up on a new connection');
});

t.test('bytes held in the socket while the visitor\'s side was full: the waiting request does not get them', async (t) => {
  // the first answer's head and part of its body fill the sink (the socket pauses); its rest and a
  // whole second answer come as two reads and wait in the paused socket; the drain lets them out together
  const server = await upstream(t, (line, socket) => {
    if (line === 'GET /held HTTP/1.1') socket.write('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello');
    if (line === 'GET /queued HTTP/1.1') socket.write(HONEST);
  });
  const client = newClient(t);
  const sink = new Collector();
  sink.full = true;
  const held = get(client, server.origin, '/held', sink);
  const socket = await server.socketOf('GET /held HTTP/1.1');
  const queued = get(client, server.origin, '/queued');
  for (let i = 0; i < 200 && sink.chunks.length === 0; i++) await sleep(10);
  t.equal(Buffer.concat(sink.chunks).toString(), 'hello', 'the body\'s start filled the sink');
  socket.write('world');
  await sleep(50);
  socket.write(SMUGGLED);
  await sleep(50);
  sink.drain();

  t.same(await queued, { status: 200, headers: ['content-length', '6'], body: 'honest' }, 'the waiting request got exactly its own answer');
  t.equal((await held).body, 'helloworld');
  await server.closed[0];
  t.same(server.connections, [['GET /held HTTP/1.1'], ['GET /queued HTTP/1.1']], 'on a new connection; the old one closed');
});

t.test('an answer read in several reads of one turn, with nothing after it: the connection still goes to the waiting request', async (t) => {
  const first = answerOfSize(300_000);
  const server = await upstream(t, (line, socket) => {
    if (line === 'GET /queued HTTP/1.1') socket.write(HONEST);
  });
  const client = newClient(t);
  const held = get(client, server.origin, '/held');
  const socket = await server.socketOf('GET /held HTTP/1.1');
  const queued = get(client, server.origin, '/queued');
  await sleep(50);
  socket.write(first.bytes);
  t.equal((await held).body.length, first.body);
  t.same(await queued, { status: 200, headers: ['content-length', '6'], body: 'honest' });
  t.same(server.connections, [['GET /held HTTP/1.1', 'GET /queued HTTP/1.1']], 'one connection carried both');
});
