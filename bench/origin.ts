// The loopback origin of the proxy scenario: a tiny node:http server answering every request with
// the same 100-byte body, keep-alive. Run as its own process; prints `{"port":N}` once listening.
// WORKERS=N (the cluster scenario, so the origin keeps up with N Portico workers): N node:cluster
// workers sharing the port, the kernel spreading the connections (SCHED_NONE).
import cluster from 'node:cluster';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

const BODY = Buffer.from('x'.repeat(99) + '\n');
const WORKERS = Math.max(1, Number(process.env.WORKERS ?? 1));
const announce = (port: number) => process.stdout.write(`${JSON.stringify({ port })}\n`);

if (WORKERS > 1 && cluster.isPrimary) {
  cluster.schedulingPolicy = cluster.SCHED_NONE;
  let listening = 0;
  // port 0 is one shared handle in a cluster: every worker gets the same port
  cluster.on('listening', (_worker, address) => {
    if (++listening === WORKERS) announce(address.port);
  });
  for (let i = 0; i < WORKERS; i++) cluster.fork();
  process.on('SIGTERM', () => {
    for (const worker of Object.values(cluster.workers ?? {})) worker?.kill();
    process.exit(0);
  });
} else {
  const server = http.createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
    // drain any request body, then answer
    req.resume();
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': BODY.length });
    res.end(BODY);
  });
  server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
    if (cluster.isPrimary) announce((server.address() as AddressInfo).port);
  });
  process.on('SIGTERM', () => process.exit(0));
}
