// A raw HTTP/2 client over TLS (RFC 9113 §4, §6): writes frames exactly as a test builds them, which
// Node's http2 client would refuse to send, and reads back every frame the server sends.
import tls from 'node:tls';

export const FRAME = { DATA: 0, HEADERS: 1, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7, WINDOW_UPDATE: 8, CONTINUATION: 9 } as const;
export const FLAG = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4 } as const;
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

export function frame(type: number, flags: number, streamId: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(streamId & 0x7fffffff, 5);
  return Buffer.concat([head, payload]);
}

/** an HPACK literal field without indexing, new name (RFC 7541 §6.2.2), for names and values < 127 bytes */
export function literal(name: string, value: string): Buffer {
  return Buffer.concat([Buffer.from([0x00, name.length]), Buffer.from(name), Buffer.from([value.length]), Buffer.from(value)]);
}

/** GET `path` on `authority` over https, as an HPACK block (static table indexes, RFC 7541 Appendix A) */
export function requestBlock(authority: string, path: string): Buffer {
  return Buffer.concat([
    Buffer.from([0x82, 0x87]), // :method GET, :scheme https
    Buffer.from([0x04, path.length]), Buffer.from(path), // :path, literal value
    Buffer.from([0x01, authority.length]), Buffer.from(authority), // :authority, literal value
  ]);
}

export interface Frame {
  type: number;
  flags: number;
  streamId: number;
  payload: Buffer;
}

export interface RawH2 {
  socket: tls.TLSSocket;
  frames: Frame[];
  /** resolves with the first GOAWAY's error code, or null if the connection closed without one */
  closed: Promise<{ goaway: number | null; at: number }>;
  write(data: Buffer): boolean;
}

/** Connects with ALPN h2, sends the preface and an empty SETTINGS, ACKs the server's SETTINGS. */
export function connectRaw(port: number, servername: string, ca: string): Promise<RawH2> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, servername, ca, checkServerIdentity: () => undefined, ALPNProtocols: ['h2'] });
    const frames: Frame[] = [];
    let buffer = Buffer.alloc(0);
    let goaway: number | null = null;
    const closed = new Promise<{ goaway: number | null; at: number }>((done) => socket.once('close', () => done({ goaway, at: performance.now() })));
    socket.on('error', () => undefined);
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      while (buffer.length >= 9) {
        const length = buffer.readUIntBE(0, 3);
        if (buffer.length < 9 + length) break;
        const received: Frame = { type: buffer[3], flags: buffer[4], streamId: buffer.readUInt32BE(5) & 0x7fffffff, payload: buffer.subarray(9, 9 + length) };
        buffer = buffer.subarray(9 + length);
        frames.push(received);
        if (received.type === FRAME.GOAWAY) goaway ??= received.payload.readUInt32BE(4);
        if (received.type === FRAME.SETTINGS && !(received.flags & FLAG.ACK) && socket.writable) socket.write(frame(FRAME.SETTINGS, FLAG.ACK, 0));
      }
      // keep only what tests look at: the count stays meaningful, the memory bounded
      if (frames.length > 10_000) frames.splice(0, frames.length - 1_000);
    });
    socket.once('secureConnect', () => {
      if (socket.alpnProtocol !== 'h2') return reject(new Error(`ALPN gave ${socket.alpnProtocol}`));
      socket.write(Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0)]));
      resolve({ socket, frames, closed, write: (data) => socket.write(data) });
    });
    socket.once('error', reject);
  });
}
