// PROXY protocol: the parser on its own, then real listeners (plain HTTP, TLS with HTTP/1.1 and h2)
// behind acceptProxyProtocol, driven by raw clients that write the header themselves.
import t, { type Test } from 'tap';
import net from 'node:net';
import tls from 'node:tls';
import http from 'node:http';
import http2 from 'node:http2';
import { once } from 'node:events';
import { Duplex } from 'node:stream';
import { acceptProxyProtocol, parseProxyHeader, proxiedAddress } from '../../src/edge/proxy-protocol.ts';
import { selfSigned } from '../../src/certs/fallback.ts';

const V2_SIGNATURE = Buffer.from('\r\n\r\n\0\r\nQUIT\n', 'latin1');

function v2(command: 'LOCAL' | 'PROXY', family: number, body: Buffer): Buffer {
  const head = Buffer.alloc(16);
  V2_SIGNATURE.copy(head);
  head[12] = 0x20 | (command === 'PROXY' ? 1 : 0);
  head[13] = (family << 4) | 1; // STREAM
  head.writeUInt16BE(body.length, 14);
  return Buffer.concat([head, body]);
}

function v2Inet4(src: [number, number, number, number], srcPort: number, tlvs = Buffer.alloc(0)): Buffer {
  const body = Buffer.alloc(12);
  body.set(src, 0);
  body.set([10, 0, 0, 1], 4);
  body.writeUInt16BE(srcPort, 8);
  body.writeUInt16BE(443, 10);
  return v2('PROXY', 1, Buffer.concat([body, tlvs]));
}

function v2Inet6(src: number[], srcPort: number): Buffer {
  const body = Buffer.alloc(36);
  body.set(src, 0);
  body[31] = 1; // destination ::1
  body.writeUInt16BE(srcPort, 32);
  body.writeUInt16BE(443, 34);
  return v2('PROXY', 2, body);
}

const V1_TCP4 = Buffer.from('PROXY TCP4 192.0.2.7 198.51.100.2 56324 443\r\n');

t.test('parseProxyHeader', async (t) => {
  t.test('v1 TCP4', async (t) => {
    const buf = Buffer.concat([V1_TCP4, Buffer.from('GET / HTTP/1.1\r\n')]);
    t.same(parseProxyHeader(buf), { done: true, consumed: V1_TCP4.length, source: { address: '192.0.2.7', port: 56324 } });
  });

  t.test('v1 TCP6 is rendered like Node renders addresses', async (t) => {
    const line = 'PROXY TCP6 2001:db8:0:0:0:0:0:1 ::1 1234 443\r\n';
    t.same(parseProxyHeader(Buffer.from(line)), { done: true, consumed: line.length, source: { address: '2001:db8::1', port: 1234 } });
  });

  t.test('v1 at the 107-byte maximum', async (t) => {
    const ff = 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff';
    const line = `PROXY TCP6 ${ff} ${ff} 65535 65535\r\n`;
    t.equal(line.length, 104); // the spec's worst case
    t.same(parseProxyHeader(Buffer.from(line)), { done: true, consumed: 104, source: { address: ff, port: 65535 } });
  });

  t.test('v1 UNKNOWN records no address', async (t) => {
    t.same(parseProxyHeader(Buffer.from('PROXY UNKNOWN\r\nGET')), { done: true, consumed: 15 });
    const line = 'PROXY UNKNOWN ffff:f::1 ffff:f::2 1 2\r\n';
    t.same(parseProxyHeader(Buffer.from(line)), { done: true, consumed: line.length });
  });

  t.test('v2 PROXY IPv4, TLVs skipped', async (t) => {
    const authority = Buffer.from([0x02, 0x00, 0x09, ...Buffer.from('localhost')]);
    const header = v2Inet4([203, 0, 113, 9], 40000, authority);
    const buf = Buffer.concat([header, Buffer.from('GET')]);
    t.same(parseProxyHeader(buf), { done: true, consumed: header.length, source: { address: '203.0.113.9', port: 40000 } });
  });

  t.test('v2 PROXY IPv6', async (t) => {
    const loopback = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    t.same(parseProxyHeader(v2Inet6(loopback, 5000)), { done: true, consumed: 52, source: { address: '::1', port: 5000 } });
    const doc = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x05];
    t.same(parseProxyHeader(v2Inet6(doc, 5001)), { done: true, consumed: 52, source: { address: '2001:db8::5', port: 5001 } });
  });

  t.test('v2 LOCAL and UNSPEC record no address', async (t) => {
    t.same(parseProxyHeader(v2('LOCAL', 0, Buffer.alloc(0))), { done: true, consumed: 16 });
    // LOCAL may still carry addresses; they are to be ignored.
    const local = v2Inet4([192, 0, 2, 1], 1);
    local[12] = 0x20;
    t.same(parseProxyHeader(local), { done: true, consumed: 28 });
    t.same(parseProxyHeader(v2('PROXY', 0, Buffer.alloc(0))), { done: true, consumed: 16 });
  });

  t.test('partial input asks for more, byte by byte', async (t) => {
    for (const header of [V1_TCP4, v2Inet4([192, 0, 2, 1], 1), v2Inet6(new Array(16).fill(0), 1)]) {
      for (let n = 0; n < header.length; n++) {
        const result = parseProxyHeader(header.subarray(0, n));
        if (!t.same(result, { done: false }, `${n} of ${header.length} bytes`)) break;
      }
    }
  });

  t.test('no header: nothing consumed', async (t) => {
    t.same(parseProxyHeader(Buffer.from('GET / HTTP/1.1\r\n')), { done: true, consumed: 0 });
    t.same(parseProxyHeader(Buffer.from('PRI * HTTP/2.0\r\n')), { done: true, consumed: 0 });
    t.same(parseProxyHeader(Buffer.from([0x16, 0x03, 0x01])), { done: true, consumed: 0 }); // TLS ClientHello
    t.same(parseProxyHeader(Buffer.from('\r\n\r\nX')), { done: true, consumed: 0 });
  });

  t.test('malformed headers are errors', async (t) => {
    const bad = [
      'PROXY TCP4 192.0.2.1\r\n',
      'PROXY TCP4 ::1 ::1 1 2\r\n',
      'PROXY TCP6 192.0.2.1 192.0.2.2 1 2\r\n',
      'PROXY TCP4 192.0.2.1 192.0.2.2 70000 2\r\n',
      'PROXY TCP4 192.0.2.1 192.0.2.2 -1 2\r\n',
      'PROXY TCP4 192.0.2.1 192.0.2.2 1 2 3\r\n',
      'PROXY TCP4  192.0.2.1 192.0.2.2 1 2\r\n',
      'PROXY UDP4 192.0.2.1 192.0.2.2 1 2\r\n',
      'PROXY TCP4 192.0.2.1 192.0.2.2 1 2\n',
    ];
    for (const line of bad) t.ok('error' in parseProxyHeader(Buffer.from(line)), JSON.stringify(line));

    const version3 = v2('PROXY', 1, Buffer.alloc(12));
    version3[12] = 0x31;
    const command2 = v2('PROXY', 1, Buffer.alloc(12));
    command2[12] = 0x22;
    const family4 = v2('PROXY', 4, Buffer.alloc(12));
    for (const header of [version3, command2, family4]) t.ok('error' in parseProxyHeader(header.subarray(0, 16)));
    t.ok('error' in parseProxyHeader(v2('PROXY', 1, Buffer.alloc(8))), 'IPv4 block too short');
    t.ok('error' in parseProxyHeader(v2('PROXY', 2, Buffer.alloc(12))), 'IPv6 block too short');
  });

  t.test('v1 longer than 107 bytes', async (t) => {
    t.same(parseProxyHeader(Buffer.from('PROXY ' + 'A'.repeat(100))), { done: false });
    t.ok('error' in parseProxyHeader(Buffer.from('PROXY ' + 'A'.repeat(101))));
    t.ok('error' in parseProxyHeader(Buffer.from('PROXY TCP4 ' + '1'.repeat(200) + '\r\n')));
  });
});

async function listen(t: Test, inner: net.Server, options: Parameters<typeof acceptProxyProtocol>[1]): Promise<number> {
  const outer = acceptProxyProtocol(inner, options);
  const sockets = new Set<net.Socket>();
  outer.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  outer.listen(0, '127.0.0.1');
  await once(outer, 'listening');
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy();
    outer.close();
    await once(outer, 'close');
  });
  return (outer.address() as net.AddressInfo).port;
}

/** Writes `prefix`, then (after `pause` ms, if given) a GET; resolves with everything the server sent. */
async function rawRequest(port: number, prefix: Buffer, pause?: number): Promise<string> {
  const socket = net.connect(port, '127.0.0.1');
  await once(socket, 'connect');
  const request = 'GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n';
  if (pause === undefined) socket.write(Buffer.concat([prefix, Buffer.from(request)]));
  else {
    socket.write(prefix);
    setTimeout(() => socket.write(request), pause);
  }
  let response = '';
  socket.on('data', (chunk) => (response += chunk));
  await closedWithin(socket, 5000);
  return response;
}

/** Waits for the server to close `socket`; gives up after `ms`, so a server that never does fails fast. */
async function closedWithin(socket: net.Socket, ms: number): Promise<void> {
  socket.setTimeout(ms, () => socket.destroy());
  await once(socket, 'close');
}

/** A stream over `raw` that sends `header` in the same write as the first bytes written to it. */
function prefixFirstWrite(raw: net.Socket, header: Buffer): Duplex {
  let pending: Buffer | undefined = header;
  const duplex = new Duplex({
    write(chunk: Buffer, _encoding, callback) {
      raw.write(pending ? Buffer.concat([pending, chunk]) : chunk, callback);
      pending = undefined;
    },
    read() {},
    final: (callback) => raw.end(callback),
    destroy(error, callback) {
      raw.destroy();
      callback(error);
    },
  });
  raw.on('data', (chunk) => duplex.push(chunk)).on('end', () => duplex.push(null)).on('close', () => duplex.destroy());
  return duplex;
}

function echoSource(seen: unknown[]): http.RequestListener {
  return (req, res) => {
    seen.push(proxiedAddress(req.socket));
    res.end('ok');
  };
}

t.test('plain HTTP behind PROXY protocol', async (t) => {
  const seen: unknown[] = [];
  const peers: string[] = [];
  const port = await listen(t, http.createServer(echoSource(seen)), {
    trusted: (address) => (peers.push(address), true),
  });

  t.match(await rawRequest(port, V1_TCP4), /^HTTP\/1.1 200/);
  t.match(await rawRequest(port, v2Inet4([203, 0, 113, 9], 40000)), /^HTTP\/1.1 200/);
  // The request arriving after the inner server took over (read by its parser, not from the buffer).
  t.match(await rawRequest(port, V1_TCP4, 50), /^HTTP\/1.1 200/);
  t.match(await rawRequest(port, Buffer.from('PROXY UNKNOWN\r\n')), /^HTTP\/1.1 200/);
  t.match(await rawRequest(port, Buffer.alloc(0)), /^HTTP\/1.1 200/, 'a trusted peer may send no header');
  t.same(seen, [
    { address: '192.0.2.7', port: 56324 },
    { address: '203.0.113.9', port: 40000 },
    { address: '192.0.2.7', port: 56324 },
    undefined,
    undefined,
  ]);
  t.same(new Set(peers), new Set(['127.0.0.1']));
});

t.test('an untrusted peer is not believed', async (t) => {
  const inner = http.createServer(() => t.fail('no request should get through'));
  const emitted: net.Socket[] = [];
  inner.on('connection', (socket: net.Socket) => emitted.push(socket));
  const port = await listen(t, inner, { trusted: () => false });

  t.match(await rawRequest(port, V1_TCP4), /^HTTP\/1.1 400/);
  t.equal(emitted.length, 1);
  t.equal(proxiedAddress(emitted[0]), undefined);
});

t.test('a malformed header from a trusted peer closes the connection', async (t) => {
  const inner = http.createServer(() => t.fail('no request should get through'));
  const port = await listen(t, inner, { trusted: () => true });
  t.equal(await rawRequest(port, Buffer.from('PROXY TCP4 nonsense\r\n')), '');
});

t.test('half a header is dropped after timeoutMs', async (t) => {
  const port = await listen(t, http.createServer(), { trusted: () => true, timeoutMs: 200 });
  const socket = net.connect(port, '127.0.0.1');
  await once(socket, 'connect');
  const started = Date.now();
  socket.write(v2Inet4([192, 0, 2, 1], 1).subarray(0, 20));
  await closedWithin(socket, 2000);
  const elapsed = Date.now() - started;
  t.ok(elapsed >= 150 && elapsed < 2000, `closed after ${elapsed} ms`);
});

t.test('the inner server still enforces headersTimeout', async (t) => {
  const inner = http.createServer({ headersTimeout: 200, requestTimeout: 300, connectionsCheckingInterval: 50 });
  const port = await listen(t, inner, { trusted: () => true });
  const socket = net.connect(port, '127.0.0.1');
  await once(socket, 'connect');
  socket.write(Buffer.concat([V1_TCP4, Buffer.from('GET / HTTP/1.1\r\nHost: localhost\r\n')]));
  let response = '';
  socket.on('data', (chunk) => (response += chunk));
  await closedWithin(socket, 2000);
  t.match(response, /^HTTP\/1.1 408/);
});

// A lost ClientHello shows as a handshake that never ends: fail in seconds, not at tap's limit.
t.test('TLS: HTTP/1.1 and h2 through an http2 secure server', { timeout: 10_000 }, async (t) => {
  const { cert, key } = await selfSigned(['localhost'], 1);
  const seen: unknown[] = [];
  const inner = http2.createSecureServer({ allowHTTP1: true, key, cert }, (req, res) => {
    seen.push([req.httpVersion, proxiedAddress(req.socket)]);
    res.end('ok');
  });
  const port = await listen(t, inner, { trusted: () => true });

  async function tlsAfterHeader(header: Buffer, alpn: string): Promise<tls.TLSSocket> {
    const socket = net.connect(port, '127.0.0.1');
    await once(socket, 'connect');
    socket.write(header);
    const secure = tls.connect({ socket, servername: 'localhost', ca: cert, ALPNProtocols: [alpn] });
    await once(secure, 'secureConnect');
    return secure;
  }

  async function get(secure: tls.TLSSocket): Promise<string> {
    secure.write('GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n');
    let response = '';
    secure.on('data', (chunk) => (response += chunk));
    await closedWithin(secure, 5000);
    return response;
  }

  t.match(await get(await tlsAfterHeader(v2Inet4([198, 51, 100, 4], 1111), 'http/1.1')), /^HTTP\/1.1 200/);

  // The ClientHello in the same segment as the header: the server's TLSSocket must take it from the
  // raw socket's buffer, where it was unshifted.
  const raw = net.connect(port, '127.0.0.1');
  await once(raw, 'connect');
  const coalesced = tls.connect({ socket: prefixFirstWrite(raw, V1_TCP4), servername: 'localhost', ca: cert });
  await once(coalesced, 'secureConnect');
  t.match(await get(coalesced), /^HTTP\/1.1 200/);

  const header = v2Inet6([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x06], 2222);
  const h2Socket = await tlsAfterHeader(header, 'h2');
  const client = http2.connect('https://localhost', { createConnection: () => h2Socket });
  t.teardown(() => client.destroy());
  const stream = client.request({ ':path': '/' });
  const [headers] = await once(stream, 'response');
  t.equal(headers[':status'], 200);
  stream.resume();
  await once(stream, 'end');
  client.close();

  t.same(seen, [
    ['1.1', { address: '198.51.100.4', port: 1111 }],
    ['1.1', { address: '192.0.2.7', port: 56324 }],
    ['2.0', { address: '2001:db8::6', port: 2222 }],
  ]);
});
