// A request's body on its way up (RFC 9112 §6, §7.1): passed through as it comes, with Content-Length
// framing written by the caller or in chunks here, and with back-pressure: a full socket pauses the
// visitor's body until it drains.
import type net from 'node:net';
import type { Readable } from 'node:stream';

export interface Upload {
  /** the exchange is over (settled, or its connection gone): nothing more is written */
  stopped(): boolean;
  /** the whole body, and its last chunk when chunked, was handed to the socket */
  sent(): void;
}

export function sendRequestBody(socket: net.Socket, body: Readable, chunked: boolean, upload: Upload): void {
  const onData = (chunk: Buffer) => {
    if (upload.stopped()) return;
    let ok: boolean;
    if (chunked) {
      if (chunk.length === 0) return;
      socket.cork();
      socket.write(`${chunk.length.toString(16)}\r\n`, 'latin1');
      socket.write(chunk);
      ok = socket.write('\r\n', 'latin1');
      socket.uncork();
    } else {
      ok = socket.write(chunk);
    }
    if (!ok) {
      body.pause();
      socket.once('drain', () => body.resume());
    }
  };
  const onEnd = () => {
    body.off('data', onData);
    body.off('end', onEnd);
    if (upload.stopped()) return;
    if (chunked) socket.write('0\r\n\r\n', 'latin1');
    upload.sent();
  };
  body.on('data', onData);
  body.on('end', onEnd);
}
