// An anchor for the proxy scenario: the least a Node proxy does — Portico's listener kind
// (http2.createSecureServer with allowHTTP1, same certificate) and an undici Agent to the origin,
// response headers copied, body streamed — and nothing else: no routing, metrics, access log,
// forwarded headers or timeouts. Env: CERT_FILE, KEY_FILE, ORIGIN (http://127.0.0.1:port).
// Prints `{"port":N}` once listening.
import http2 from 'node:http2';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { Agent, type Dispatcher } from 'undici';
// Portico's suite order: AES-128-GCM first in TLS 1.3, where the clients here list AES-256 first
import { CIPHERS } from '../src/edge/listeners.ts';

const origin = process.env.ORIGIN!;
const agent = new Agent({ keepAliveTimeout: 30_000, connections: 256 });

const server = http2.createSecureServer({ key: readFileSync(process.env.KEY_FILE!), cert: readFileSync(process.env.CERT_FILE!), ciphers: CIPHERS, honorCipherOrder: true, allowHTTP1: true }, async (req, res) => {
  try {
    const upstream = await agent.request({ origin, path: req.url, method: req.method as Dispatcher.HttpMethod, headers: { 'x-forwarded-for': req.socket.remoteAddress ?? '' } });
    res.statusCode = upstream.statusCode;
    for (const [name, value] of Object.entries(upstream.headers)) {
      if (value !== undefined && name !== 'connection' && name !== 'keep-alive' && name !== 'transfer-encoding') res.setHeader(name, value);
    }
    for await (const chunk of upstream.body) res.write(chunk);
    res.end();
  } catch {
    if (!res.headersSent) res.statusCode = 502;
    res.end();
  }
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
});
process.on('SIGTERM', () => process.exit(0));
