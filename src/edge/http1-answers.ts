// HTTP/1.1 at the listeners, where Node's defaults answer for Portico: a request its parser refuses,
// `Expect: 100-continue`, and why a listener could not bind.
import type http from 'node:http';
import type http2 from 'node:http2';
import type net from 'node:net';
import type { Duplex } from 'node:stream';
import { errorBody } from '../errors.ts';

/**
 * Why a listener could not bind, in words for the two reasons an operator meets: a worker's own error
 * read "bind EADDRINUSE null:8443" (the address as cluster mode passes it); Node's words otherwise.
 */
export function bindFailure(err: NodeJS.ErrnoException): Error {
  if (err.code === 'EADDRINUSE') return Object.assign(new Error('another process listens there (EADDRINUSE)'), { code: err.code });
  if (err.code === 'EACCES') return Object.assign(new Error('not allowed (EACCES): a port below 1024 needs root or the CAP_NET_BIND_SERVICE capability'), { code: err.code });
  return err;
}

/**
 * `Expect: 100-continue` over HTTP/1.1: the 100 goes out when the body is first read, not as soon as the
 * head arrives (Node's way without a 'checkContinue' listener). A request refused from its head alone
 * (413 from its Content-Length, 401, 404…) gets that answer instead, and the client never sends a body
 * nobody reads; Node then closes the connection, since the body was not read. Go's server does the
 * same. Over HTTP/2 the 100 goes out at once, as Node does it.
 */
export function continueWhenRead(server: http.Server | http2.Http2SecureServer): void {
  server.on('checkContinue', (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => {
    if (req.httpVersionMajor === 2) res.writeContinue();
    else {
      const readable = req as http.IncomingMessage & { _read(size: number): void };
      const read = readable._read;
      readable._read = function (this: http.IncomingMessage, size: number) {
        readable._read = read;
        if (!res.headersSent) res.writeContinue();
        return read.call(this, size);
      };
    }
    server.emit('request', req, res);
  });
}

/**
 * A request Node's HTTP/1.1 parser refuses (Content-Length with Transfer-Encoding, a bad chunk, a NUL
 * byte…): an Error body saying so, where Node's own answer is a bare 400, then the connection closes
 * as Node closes it, so nothing after it is read as a request. What Node answers otherwise (431 for
 * headers too large, 408 past the request timeout) stays as Node does it. When: while no answer is on
 * its way on the connection — on a fresh one, and on a keep-alive one whose answers are all out (it
 * closed without a word there, which a client reads as a connection lost and may send again) — or
 * when the fault is in the body of the request being answered, nothing of its answer sent yet. Behind
 * the answer to an earlier request (pipelined) the connection closes without one: Node writes its
 * 400 there, and the client takes it for the answer to the earlier, valid request.
 */
export function answerClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  const net = socket as net.Socket & { _httpMessage?: http.ServerResponse | null };
  // the answer on its way on the connection (Node's own test in its default handler)
  const pending = net._httpMessage;
  if (net.writable && (!pending || (!pending.headersSent && !pending.req.complete))) {
    if (err.code === 'HPE_HEADER_OVERFLOW') net.write('HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n');
    else if (err.code === 'HPE_CHUNK_EXTENSIONS_OVERFLOW') net.write('HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\n\r\n');
    else if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') net.write('HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n');
    else {
      const body = JSON.stringify(errorBody('invalid_request', `The request is not valid HTTP/1.1 (${(err as { reason?: string }).reason ?? err.code ?? 'unreadable'}); the connection is closed.`));
      net.write(`HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
    }
  }
  net.destroy(err);
}
