// The loopback origin of the proxy scenario: a tiny node:http server answering every request with
// the same 100-byte body, keep-alive. Run as its own process; prints `{"port":N}` once listening.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

const BODY = Buffer.from('x'.repeat(99) + '\n');

const server = http.createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
  // drain any request body, then answer
  req.resume();
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': BODY.length });
  res.end(BODY);
});
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
});
process.on('SIGTERM', () => process.exit(0));
