// A real loopback upstream for proxy tests: one HTTP/1.1 server on 127.0.0.1, port 0, with a path
// per behaviour, and a count of its open sockets so tests can show nothing leaks.
//   /echo          → 200 JSON {method, url, httpVersion, headers, body}
//   /slow?ms=N     → 200 after N ms (the timer is dropped when the request goes away)
//   /reset         → destroys the socket without answering
//   /download?bytes=N[&gate=1] → N bytes (byte i is i % 251), streamed in 64 KiB chunks with
//                    backpressure; with gate=1 it sends the first chunk, then waits for openGate()
//   /upload        → counts the body's bytes as they arrive (never buffering them) → {bytes}
//   /hop           → 200 with hop-by-hop response headers, to see that they stay on this hop
//   /ws            → WebSocket echo (ws package); each upgrade request's headers are kept
import http from 'node:http';
import type { Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';

export interface Upstream {
  /** `http://127.0.0.1:<port>` */
  url: string;
  port: number;
  /** sockets open right now */
  readonly openSockets: number;
  /** sockets accepted since start */
  readonly acceptedSockets: number;
  /** bytes of the upload in progress (or the last one) received so far */
  readonly uploadedBytes: number;
  /** headers of each WebSocket upgrade request, in order */
  wsRequests: http.IncomingHttpHeaders[];
  /** lets a gated /download continue */
  openGate(): void;
  /** resolves once no socket is open, or rejects after `ms` with the count */
  drained(ms?: number): Promise<void>;
  stop(): Promise<void>;
}

export const CHUNK = 64 * 1024;

/** The bytes /download sends, for checking what arrived. */
export function downloadByte(index: number): number {
  return index % 251;
}

export async function startUpstream(): Promise<Upstream> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  let uploaded = 0;
  let gate = Promise.withResolvers<void>();
  const wsRequests: http.IncomingHttpHeaders[] = [];

  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://upstream');
    switch (url.pathname) {
      case '/echo': {
        const chunks: Buffer[] = [];
        req.on('data', (chunk: Buffer) => chunks.push(chunk));
        req.on('end', () => {
          const body = JSON.stringify({ method: req.method, url: req.url, httpVersion: req.httpVersion, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
        });
        return;
      }
      case '/slow': {
        const timer = setTimeout(() => res.end('slow answer\n'), Number(url.searchParams.get('ms') ?? 1000));
        res.once('close', () => clearTimeout(timer));
        req.resume();
        return;
      }
      case '/reset':
        req.socket.destroy();
        return;
      case '/download':
        void download(res, Number(url.searchParams.get('bytes') ?? CHUNK), url.searchParams.has('gate') ? gate.promise : null);
        req.resume();
        return;
      case '/upload':
        uploaded = 0;
        req.on('data', (chunk: Buffer) => {
          uploaded += chunk.length;
        });
        req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ bytes: uploaded })));
        return;
      case '/hop':
        res.writeHead(200, {
          connection: 'keep-alive, X-Upstream-Hop',
          'keep-alive': 'timeout=5',
          'x-upstream-hop': 'connection-only',
          'proxy-connection': 'keep-alive',
          upgrade: 'h2c',
          'x-end-to-end': 'kept',
          'content-type': 'text/plain',
        });
        res.end('hop\n');
        return;
      default:
        res.writeHead(404).end();
    }
  });
  server.on('connection', (socket: Socket) => {
    accepted++;
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  const wss = new WebSocketServer({ server, path: '/ws' });
  wss.on('connection', (ws, req) => {
    wsRequests.push(req.headers);
    ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
  });

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    port,
    get openSockets() {
      return sockets.size;
    },
    get acceptedSockets() {
      return accepted;
    },
    get uploadedBytes() {
      return uploaded;
    },
    wsRequests,
    openGate() {
      gate.resolve();
      gate = Promise.withResolvers<void>();
    },
    async drained(ms = 2000) {
      const deadline = Date.now() + ms;
      while (sockets.size > 0) {
        if (Date.now() > deadline) throw new Error(`${sockets.size} upstream socket(s) still open after ${ms} ms`);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
    async stop() {
      for (const client of wss.clients) client.terminate();
      wss.close();
      server.closeAllConnections();
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function download(res: http.ServerResponse, bytes: number, gate: Promise<void> | null): Promise<void> {
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': bytes });
  let sent = 0;
  while (sent < bytes && !res.destroyed) {
    const size = Math.min(CHUNK, bytes - sent);
    const chunk = Buffer.allocUnsafe(size);
    for (let i = 0; i < size; i++) chunk[i] = downloadByte(sent + i);
    const first = sent === 0;
    sent += size;
    if (!res.write(chunk)) await drained(res);
    if (gate && first) await gate;
  }
  res.end();
}

/** Resolves at 'drain' or 'close', whichever comes first, and leaves no listener behind (one wait per chunk). */
function drained(res: http.ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done).off('close', done);
      resolve();
    };
    res.once('drain', done).once('close', done);
  });
}

/** A port that refuses connections: bound once, then released. */
export async function closedPort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
