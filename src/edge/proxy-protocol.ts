// PROXY protocol v1 (text) and v2 (binary) for listeners behind a TCP load balancer, per HAProxy's
// proxy-protocol.txt (https://www.haproxy.org/download/3.0/doc/proxy-protocol.txt). The balancer
// prefixes each connection with a header naming the real client; we read it off the raw socket
// before the HTTP or TLS server sees a byte, and remember the client address per raw socket.
import net from 'node:net';

export interface ProxySource {
  address: string;
  port: number;
}

export type ParseResult = { done: false } | { done: true; consumed: number; source?: ProxySource } | { error: string };

interface ConnectionSink {
  emit(event: 'connection', socket: net.Socket): boolean;
}

const V1_SIGNATURE = Buffer.from('PROXY ', 'latin1');
const V2_SIGNATURE = Buffer.from('\r\n\r\n\0\r\nQUIT\n', 'latin1');
// §2.1: a v1 line is at most 107 bytes, CRLF included; a receiver must not read further.
const V1_MAX = 107;
const V2_FIXED = 16;

// Keyed by the raw socket: it is the one object every later wrapper (TLSSocket, http2 compat
// proxy) can lead back to, and the entry goes when the socket does.
const sources = new WeakMap<object, ProxySource>();

export function acceptProxyProtocol(
  inner: net.Server | ConnectionSink,
  options: { trusted: (address: string) => boolean; timeoutMs?: number },
): net.Server {
  const { trusted, timeoutMs = 5000 } = options;
  const sink: ConnectionSink = inner;
  // http and https servers turn noDelay on by default, but net applies it when it accepts, which
  // is now this server's job; for TLS it saves a Nagle delay on handshake flights too.
  const outer = net.createServer({ noDelay: true }, (socket) => {
    // An untrusted peer's header is not believed: its bytes reach the inner server as they are.
    if (!trusted(socket.remoteAddress ?? '')) sink.emit('connection', socket);
    else readHeader(socket, timeoutMs, sink);
  });
  // http, https and http2 (allowHTTP1) servers start the timer that enforces headersTimeout and
  // requestTimeout on 'listening'; the inner server never listens, so pass the event on.
  if (inner instanceof net.Server) outer.on('listening', () => inner.emit('listening'));
  return outer;
}

export function proxiedAddress(socket: net.Socket | object): ProxySource | undefined {
  // tls and http2 servers wrap the emitted raw socket in a TLSSocket that keeps it at `_parent`;
  // the http2 compat `req.socket` is a Proxy that forwards `_parent` to that TLSSocket.
  const parent = (socket as { _parent?: unknown })._parent;
  return sources.get(socket) ?? (parent instanceof net.Socket ? sources.get(parent) : undefined);
}

function readHeader(socket: net.Socket, timeoutMs: number, sink: ConnectionSink): void {
  let received = Buffer.alloc(0);
  const timer = setTimeout(() => socket.destroy(), timeoutMs);
  const stop = () => {
    clearTimeout(timer);
    socket.off('readable', onReadable).off('error', drop).off('close', stop);
  };
  const drop = () => {
    stop();
    socket.destroy();
  };
  function onReadable() {
    for (let chunk: Buffer | null; (chunk = socket.read()) !== null; ) received = Buffer.concat([received, chunk]);
    const result = parseProxyHeader(received);
    if ('error' in result) return drop();
    if (!result.done) return;
    stop();
    if (result.source) sources.set(socket, result.source);
    // The inner server reads whatever is buffered first (TLSSocket does so explicitly), so the
    // bytes after the header are not lost.
    if (result.consumed < received.length) socket.unshift(received.subarray(result.consumed));
    sink.emit('connection', socket);
  }
  socket.on('readable', onReadable).on('error', drop).on('close', stop);
}

/** Pure and incremental: `done: false` until `buf` holds a whole header; `consumed: 0` when it is not one. */
export function parseProxyHeader(buf: Buffer): ParseResult {
  if (startsWith(buf, V2_SIGNATURE)) return parseV2(buf);
  if (startsWith(buf, V1_SIGNATURE)) return parseV1(buf);
  if (couldStart(buf, V2_SIGNATURE) || couldStart(buf, V1_SIGNATURE)) return { done: false };
  return { done: true, consumed: 0 };
}

function parseV1(buf: Buffer): ParseResult {
  const lf = buf.subarray(0, V1_MAX).indexOf('\n');
  if (lf === -1) return buf.length < V1_MAX ? { done: false } : { error: 'v1 header longer than 107 bytes' };
  if (buf[lf - 1] !== 0x0d) return { error: 'v1 header not ended by CRLF' };
  const consumed = lf + 1;
  const [, protocol, src, dst, srcPort, dstPort, ...extra] = buf.toString('latin1', 0, lf - 1).split(' ');
  // §2.1: with UNKNOWN the rest of the line is to be ignored, and the peer address kept.
  if (protocol === 'UNKNOWN') return { done: true, consumed };
  const isIP = protocol === 'TCP4' ? net.isIPv4 : protocol === 'TCP6' ? net.isIPv6 : undefined;
  if (!isIP || !isIP(src) || !isIP(dst) || !isPort(srcPort) || !isPort(dstPort) || extra.length > 0) {
    return { error: 'malformed v1 header' };
  }
  // Rendered the way Node renders socket addresses (0:0:0:0:0:0:0:1 → ::1), so both compare equal.
  const address = protocol === 'TCP6' ? new net.SocketAddress({ address: src, family: 'ipv6' }).address : src;
  return { done: true, consumed, source: { address, port: Number(srcPort) } };
}

function parseV2(buf: Buffer): ParseResult {
  if (buf.length < V2_FIXED) return { done: false };
  const version = buf[12] >> 4;
  const command = buf[12] & 0x0f; // 0 LOCAL, 1 PROXY
  const family = buf[13] >> 4; // 0 UNSPEC, 1 INET, 2 INET6, 3 UNIX
  const transport = buf[13] & 0x0f; // 0 UNSPEC, 1 STREAM, 2 DGRAM
  // §2.2: unassigned values must be rejected, so fail before waiting for the rest.
  if (version !== 2) return { error: `unsupported PROXY protocol version ${version}` };
  if (command > 1 || family > 3 || transport > 2) return { error: 'malformed v2 header' };
  const consumed = V2_FIXED + buf.readUInt16BE(14);
  if (buf.length < consumed) return { done: false };
  // TLVs may follow the addresses; `consumed` skips them, nothing here needs them.
  const body = buf.subarray(V2_FIXED, consumed);
  // LOCAL is the balancer's own connection (a health check): the peer address is the real one.
  if (command === 0) return { done: true, consumed };
  if (family === 1) {
    if (body.length < 12) return { error: 'v2 IPv4 addresses truncated' };
    return { done: true, consumed, source: { address: body.subarray(0, 4).join('.'), port: body.readUInt16BE(8) } };
  }
  if (family === 2) {
    if (body.length < 36) return { error: 'v2 IPv6 addresses truncated' };
    const groups = Array.from({ length: 8 }, (_, i) => body.readUInt16BE(i * 2).toString(16));
    const address = new net.SocketAddress({ address: groups.join(':'), family: 'ipv6' }).address;
    return { done: true, consumed, source: { address, port: body.readUInt16BE(32) } };
  }
  // UNSPEC and UNIX carry no IP address to report.
  return { done: true, consumed };
}

function startsWith(buf: Buffer, signature: Buffer): boolean {
  return buf.length >= signature.length && buf.subarray(0, signature.length).equals(signature);
}

function couldStart(buf: Buffer, signature: Buffer): boolean {
  return buf.length < signature.length && signature.subarray(0, buf.length).equals(buf);
}

function isPort(text: string | undefined): boolean {
  return text !== undefined && /^\d{1,5}$/.test(text) && Number(text) <= 65535;
}
