// A request's body on its way up (RFC 9112 §6, §7.1): passed through as it comes, with Content-Length
// framing written by the caller or in chunks here, and with back-pressure: a full socket pauses the
// visitor's body until it drains. Portico frames what goes up, never the visitor: a body that brings
// more or fewer bytes than the Content-Length announced upstream is cut at that length and the
// exchange broken (Node's servers already hold HTTP/1.1 and HTTP/2 visitors to their declared length;
// this keeps the upstream connection's framing whole even if one did not).
import type net from 'node:net';
import type { Readable } from 'node:stream';

export interface Upload {
  /** the exchange is over (settled, or its connection gone): nothing more is written */
  stopped(): boolean;
  /** the whole body, and its last chunk when chunked, was handed to the socket */
  sent(): void;
  /** the body did not match `length`: the connection cannot carry a well-framed request any more */
  broken(why: string): void;
}

/** `length`: the Content-Length written upstream; undefined: the body goes chunked */
export function sendRequestBody(socket: net.Socket, body: Readable, length: number | undefined, upload: Upload): void {
  const chunked = length === undefined;
  let left = length ?? 0;
  const onData = (chunk: Buffer) => {
    if (upload.stopped()) return;
    let ok: boolean;
    if (!chunked && chunk.length > left) {
      socket.write(chunk.subarray(0, left));
      stop();
      upload.broken('the request body was longer than its Content-Length');
      return;
    }
    if (chunked) {
      if (chunk.length === 0) return;
      socket.cork();
      socket.write(`${chunk.length.toString(16)}\r\n`, 'latin1');
      socket.write(chunk);
      ok = socket.write('\r\n', 'latin1');
      socket.uncork();
    } else {
      left -= chunk.length;
      ok = socket.write(chunk);
    }
    if (!ok) {
      body.pause();
      socket.once('drain', () => body.resume());
    }
  };
  const stop = () => {
    body.off('data', onData);
    body.off('end', onEnd);
  };
  const onEnd = () => {
    stop();
    if (upload.stopped()) return;
    if (!chunked && left > 0) {
      upload.broken('the request body was shorter than its Content-Length');
      return;
    }
    if (chunked) socket.write('0\r\n\r\n', 'latin1');
    upload.sent();
  };
  body.on('data', onData);
  body.on('end', onEnd);
}
