// The anchor of the /v1 scenario: a bare Node HTTPS server that answers every request itself with a
// fixed JSON body (BODY_FILE, else `[]`), keep-alive, with the certificate Portico serves
// (CERT_FILE / KEY_FILE). SERVER=h2 uses http2.createSecureServer({allowHTTP1}) like Portico's
// listener; the default is https.createServer. Prints `{"port":N}` once listening.
// REDIS_URL set: before answering, the one rate-limit call /v1 makes per request (Portico's
// RedisLimiter: the same Lua script, the same pipelined connection) and its X-RateLimit-* headers,
// and nothing else of Portico's: the floor of a /v1 request on Redis. Any URL Portico takes
// (redis://, redis+sentinel://, redis+cluster://): the limiter finds its node through Portico's own
// connections (state/redis.ts), as Portico's does, so there is a floor per topology.
// AFTER_READS=1 (without REDIS_URL): each answer is written after the turn's reads, with Portico's own
// after-reads.ts, as Portico writes its /v1 answers; without it, inside the read that brought the request.
import https from 'node:https';
import http2 from 'node:http2';
import { readFileSync } from 'node:fs';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { IncomingMessage, ServerResponse } from 'node:http';
// Portico's suite order: AES-128-GCM first in TLS 1.3, where the clients here list AES-256 first
import { CIPHERS } from '../src/edge/listeners.ts';
import { RedisLimiter } from '../src/ratelimit/redis-limiter.ts';
import { connectRedis } from '../src/state/redis.ts';
import { afterReads } from '../src/after-reads.ts';

const body = process.env.BODY_FILE ? readFileSync(process.env.BODY_FILE) : Buffer.from('[]');
const tls = { key: readFileSync(process.env.KEY_FILE!), cert: readFileSync(process.env.CERT_FILE!), ciphers: CIPHERS, honorCipherOrder: true };

const headers = { 'content-type': 'application/json; charset=utf-8', 'content-length': body.length };
const write = (res: ServerResponse | http2.Http2ServerResponse) => {
  (res as ServerResponse).writeHead(200, headers);
  res.end(body);
};
const answer = (req: IncomingMessage | http2.Http2ServerRequest, res: ServerResponse | http2.Http2ServerResponse) => {
  req.resume();
  write(res);
};
const answerAfterReads = (req: IncomingMessage | http2.Http2ServerRequest, res: ServerResponse | http2.Http2ServerResponse) => {
  req.resume();
  afterReads(() => write(res));
};

const limited = await (async () => {
  if (!process.env.REDIS_URL) return undefined;
  const connections = connectRedis(process.env.REDIS_URL, 2000);
  // Sentinel and Cluster name the limiter's node once ioredis is ready there
  if (connections.client.status !== 'ready') await once(connections.client, 'ready');
  const limiter = new RedisLimiter(connections);
  const limit = { perMinute: 100_000_000, perDay: 1_000_000_000 };
  const ban = { refusals: 1000, windowSeconds: 60, banSeconds: 60 };
  return (req: IncomingMessage | http2.Http2ServerRequest, res: ServerResponse | http2.Http2ServerResponse) => {
    req.resume();
    limiter.consume('bare:production', limit, ban).then((decision) => {
      (res as ServerResponse).writeHead(200, ['content-type', headers['content-type'], 'content-length', String(body.length), 'x-ratelimit-limit', String(decision.limit), 'x-ratelimit-remaining', String(decision.remaining), 'x-ratelimit-reset', String(decision.reset)]);
      res.end(body);
    }, () => {
      (res as ServerResponse).writeHead(503);
      res.end();
    });
  };
})();

const handler = limited ?? (process.env.AFTER_READS === '1' ? answerAfterReads : answer);
const server = process.env.SERVER === 'h2'
  ? http2.createSecureServer({ ...tls, allowHTTP1: true }, handler)
  : https.createServer({ ...tls, keepAliveTimeout: 60_000 }, handler);
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
});
process.on('SIGTERM', () => process.exit(0));
