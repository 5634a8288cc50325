// WebSockets over HTTP/1.1 (RFC 6455 §4, RFC 9110 §7.8): the visitor's Upgrade request goes to the
// project's upstream, and its answer comes back as Portico writes any answer: the upstream's framing
// and hop-by-hop fields never reach the visitor (DESIGN §3).
// 0. answers go out in request order (RFC 9112 §9.3.2): an Upgrade pipelined behind requests still
//    being answered waits for them (afterEarlierAnswers(), which the listener calls) before anything
//    happens, its upstream request included;
// 1. the request: the headers project-proxy.ts gives (its own Host, X-Forwarded-*, no hop-by-hop but
//    `Connection: Upgrade` and `Upgrade: websocket`, no body framing); the visitor's bytes after the
//    request head wait, and go into the tunnel once it is open;
// 2. 101 with `Upgrade: websocket` → the visitor gets a 101 with the upstream's end-to-end fields
//    (Sec-WebSocket-Accept, -Protocol, -Extensions, Set-Cookie …), then bytes are copied both ways; a
//    101 without Upgrade (RFC 9110 §15.2.2), or switching to another protocol than the visitor asked
//    for (§7.8) → 502, the page for an answer that could not be passed on;
// 3. any other answer is a refusal, relayed with Portico's framing (Content-Length when the upstream
//    gave one, else chunked) and `Connection: close`; the connection closes after it. Its body may not
//    go silent for `timeoutMs`, as a forwarded body may not (forward.ts);
// 4. unreachable, reset or not valid HTTP/1.1 before an answer head → 502 page; no complete answer
//    head within `timeoutMs` of the request → 504 page. Once a head has gone out, a failure can only
//    close the connection (a second answer inside the first one's body would be read as its body);
// 5. one side of the tunnel closing ends the other (FIN first, then destroyed once written).
import http, { ServerResponse, type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { sendPage, upstreamFailurePage } from '../edge/pages.ts';
import { connectionTokens, isHopByHop } from './forward.ts';
import { MAX_INTERIM } from './http1-connection.ts';

const EMPTY = Buffer.alloc(0);

/** The status an upgrade is recorded with when its visitor left before any answer (nginx's "client closed request"), as over HTTP/2. */
const CLIENT_CLOSED = 499;

export interface UpgradeOptions {
  /** connect + the answer's head; then each silence in a refusal's body */
  timeoutMs: number;
  /** the visitor's hostname, for the 502/504 pages */
  hostname: string;
  /** one call per upstream failure; the visitor leaving is none */
  onError(): void;
  /**
   * once, when the visitor's connection has closed: the status it was answered (101: the WebSocket
   * was open, and this is its end), `aborted` when that answer was cut short or never came
   */
  onEnd(status: number, aborted: boolean): void;
}

export function passUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, target: URL, headers: OutgoingHttpHeaders, options: UpgradeOptions): void {
  const visitor = socket as net.Socket;
  // 0 until the visitor was answered; then the status its access line carries
  let status = 0;
  let cut = false;
  // the answer written by a ServerResponse (3., 4.); a 101 is written by hand
  let res: ServerResponse | undefined;
  const secure = target.protocol === 'https:';
  const hostname = target.hostname.startsWith('[') ? target.hostname.slice(1, -1) : target.hostname;
  let request: http.ClientRequest;
  try {
    request = (secure ? https : http).request({
      host: hostname,
      port: target.port || (secure ? 443 : 80),
      path: target.pathname + target.search,
      method: 'GET',
      headers,
      agent: false,
      // an https upstream's certificate is verified for its own name (Node's CAs + NODE_EXTRA_CA_CERTS)
      ...(secure && net.isIP(hostname) === 0 ? { servername: hostname } : {}),
    });
  } catch {
    // a header value Node will not send
    options.onError();
    const page = upstreamFailurePage(undefined, options.hostname);
    refuseUpgrade(req, socket, page.status, page.html, options.onEnd);
    return;
  }
  // 4. and 3.: one clock for connecting and the answer's head, then for each gap in a refusal's body
  // (not while the visitor holds it back by not reading: then the wait is the visitor's, as in forward.ts)
  let held = false;
  const timer = setTimeout(() => {
    if (held) {
      timer.refresh();
      return;
    }
    request.destroy();
    fail('timeout');
  }, options.timeoutMs);
  visitor.once('close', () => {
    clearTimeout(timer);
    // an open tunnel's upstream side is closed by join(); before that, the request goes
    if (status !== 101) request.destroy();
    options.onEnd(status || CLIENT_CLOSED, status === 0 || cut || (res !== undefined && !res.writableFinished));
  });
  let failed = false;
  /** once: before anything went to the visitor, a 502/504 page; after, the connection is cut (4.) */
  const fail = (kind: string | undefined) => {
    clearTimeout(timer);
    // a tunnel, or an answer already whole, is not taken back
    if (failed || visitor.destroyed || status === 101 || res?.writableEnded) return;
    failed = true;
    options.onError();
    if (status !== 0) {
      status = kind === 'timeout' ? 504 : 502;
      cut = true;
      visitor.destroy();
      return;
    }
    const page = upstreamFailurePage(kind, options.hostname);
    status = page.status;
    res ??= answerOn(req, socket);
    sendPage(res, page.status, page.html);
  };
  // before an answer: unreachable, reset, not HTTP/1.1. After a refusal's head: its body broke off
  // (Node then ends a body read to the close as if it were whole, so this is the only sign of it)
  request.on('error', (err: Error & { code?: string }) => fail(err.code?.startsWith('HPE_') ? 'invalid_response' : undefined));
  // 1xx answers before the 101 or the refusal are skipped, as forwarded requests skip them, and at
  // most MAX_INTERIM of them, as there (http1-connection.ts): a flood had the head's whole clock
  let interim = 0;
  request.on('information', () => {
    if (++interim <= MAX_INTERIM) return;
    request.destroy();
    fail('invalid_response');
  });
  request.on('upgrade', (answer: IncomingMessage, upstream: net.Socket, upstreamHead: Buffer) => {
    clearTimeout(timer);
    upstream.on('error', () => upstream.destroy());
    // failed already: the 101 came in the same read as what was refused (a flood of 1xx answers)
    if (visitor.destroyed || failed) {
      upstream.destroy();
      return;
    }
    // 2.: the visitor asked for a WebSocket (project-proxy.ts lets no other upgrade through)
    if (answer.headers.upgrade?.toLowerCase() !== 'websocket') {
      upstream.destroy();
      fail('invalid_response');
      return;
    }
    status = 101;
    // latin1: the upstream's field bytes as they came (Node reads them one byte a character), as a
    // forwarded answer's are; the default UTF-8 would turn an obs-text byte (0xE9) into two
    visitor.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n${endToEndLines(answer.rawHeaders)}\r\n`, 'latin1');
    join(visitor, upstream, head, upstreamHead);
  });
  request.on('response', (answer: IncomingMessage) => {
    if (visitor.destroyed) {
      request.destroy();
      return;
    }
    // Node passes a 101 without `Upgrade` on as a final answer: no switch the visitor could follow
    if (answer.statusCode === 101) {
      request.destroy();
      fail('invalid_response');
      return;
    }
    timer.refresh();
    const out = answerOn(req, socket);
    try {
      out.statusCode = answer.statusCode ?? 502;
      const fields = endToEndFields(answer.rawHeaders);
      for (let i = 0; i < fields.length; i += 2) out.appendHeader(fields[i], fields[i + 1]);
      // the framing is Portico's: the upstream's length when it gave one (llhttp checked it), else chunked
      if (answer.headers['content-length'] !== undefined && answer.headers['transfer-encoding'] === undefined) out.setHeader('content-length', answer.headers['content-length']);
    } catch {
      // a field Node's writer refuses (its checks differ from llhttp's in places)
      for (const name of out.getHeaderNames()) out.removeHeader(name);
      res = out;
      request.destroy();
      fail('invalid_response');
      return;
    }
    res = out;
    status = out.statusCode;
    // the head goes out now, not with the body's first bytes: the visitor learns the refusal at once.
    // An empty Buffer sends it, as latin1 like any head before a Buffer (the upstream's bytes as they
    // came); flushHeaders() writes it as a string in UTF-8. A status without a body sends it at end().
    out.write(EMPTY);
    answer.on('data', (chunk: Buffer) => {
      timer.refresh();
      if (out.write(chunk)) return;
      held = true;
      answer.pause();
    });
    out.on('drain', () => {
      held = false;
      timer.refresh();
      answer.resume();
    });
    answer.once('end', () => {
      clearTimeout(timer);
      if (!failed) out.end();
    });
    // cut before the body's end (a timeout has called fail() already)
    answer.once('close', () => {
      if (!answer.complete) fail(undefined);
    });
  });
  request.end();
}

/**
 * Calls `next` once the answers Node's HTTP/1.1 server still owes on this connection are written, so
 * an Upgrade (or CONNECT) pipelined behind other requests is answered after them (0. above). Node emits
 * 'upgrade' as soon as the request's head is parsed, whatever is still being answered. The answer
 * being written holds the socket as `socket._httpMessage`; those queued behind it get the socket one
 * by one from the server's own 'finish' listener (resOnFinish, added when each was created, so it runs
 * before this one's), which also clears `_httpMessage` after the last. So: wait for the 'finish' of
 * whatever holds the socket until nothing does. The visitor's bytes after the Upgrade stay unread
 * meanwhile. `next` is not called when the connection can no longer carry an answer (it closed, or an
 * earlier answer said `Connection: close`): the caller's 'close' listener sees that.
 */
export function afterEarlierAnswers(socket: Duplex, next: () => void): void {
  const earlier = (socket as { _httpMessage?: ServerResponse | null })._httpMessage;
  if (earlier) {
    earlier.once('finish', () => afterEarlierAnswers(socket, next));
    return;
  }
  if (socket.writable) next();
}

/**
 * An answer on an upgrade request's connection, which Node's HTTP server has handed over: written
 * by a ServerResponse as any other (Content-Length or chunked, Date), with `Connection: close`, and
 * the connection closed once it is out. The visitor's bytes after the request are read and dropped:
 * nothing will read them, and closing over unread bytes would reset the connection under the answer.
 * Only once the earlier answers on the connection are out (afterEarlierAnswers()): two answers cannot
 * share it, and Node refuses to (ERR_HTTP_SOCKET_ASSIGNED).
 */
export function answerOn(req: IncomingMessage, socket: Duplex): ServerResponse {
  const visitor = socket as net.Socket;
  const res = new ServerResponse(req);
  res.shouldKeepAlive = false;
  res.assignSocket(visitor);
  res.once('finish', () => visitor.destroySoon());
  visitor.resume();
  return res;
}

/** A refusal of Portico's own (not the upstream's): `onEnd` as passUpgrade() calls it. */
export function refuseUpgrade(req: IncomingMessage, socket: Duplex, status: number, html: string, onEnd: UpgradeOptions['onEnd']): void {
  const res = answerOn(req, socket);
  socket.once('close', () => onEnd(status, !res.writableFinished));
  sendPage(res, status, html);
}

/** Copies bytes both ways until both sides have closed; see 5. at the top. */
function join(visitor: net.Socket, upstream: net.Socket, head: Buffer, upstreamHead: Buffer): void {
  for (const side of [visitor, upstream]) {
    side.setNoDelay(true);
    // an idle WebSocket is not a dead one; a peer gone without a word is found by TCP keep-alive
    side.setTimeout(0);
    side.setKeepAlive(true);
  }
  if (upstreamHead.length > 0) visitor.write(upstreamHead);
  if (head.length > 0) upstream.write(head);
  upstream.pipe(visitor);
  visitor.pipe(upstream);
  // pipe() ends the other side on a clean end; a peer that never answers that FIN (or a side that
  // broke off) would keep the other half-open, so finish writing and then destroy
  visitor.once('close', () => upstream.destroySoon());
  upstream.once('close', () => visitor.destroySoon());
}

/** The upstream's header fields the visitor may see: no hop-by-hop, framing or Connection-named field. */
function endToEndFields(raw: string[]): string[] {
  const connection: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (raw[i].toLowerCase() === 'connection') connection.push(raw[i + 1]);
  const named = connectionTokens(connection);
  const kept: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    if (isHopByHop(name) || name === 'content-length' || named.has(name)) continue;
    kept.push(name, raw[i + 1]);
  }
  return kept;
}

function endToEndLines(raw: string[]): string {
  const fields = endToEndFields(raw);
  let lines = '';
  for (let i = 0; i < fields.length; i += 2) lines += `${fields[i]}: ${fields[i + 1]}\r\n`;
  return lines;
}
