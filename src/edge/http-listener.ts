// The plain HTTP listener: ACME HTTP-01 challenges (RFC 8555 §8.3), everything else 308 to HTTPS.
// Redirects leave after the turn's reads (after-reads.ts): about 34,000 → 60,000 per CPU-second here.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { afterReads } from '../after-reads.ts';
import { hostnameFromHost } from '../routing/hostname.ts';
import type { Metrics } from '../metrics.ts';
import { accessLogger, type Logger } from '../log.ts';
import { checkTarget } from './request-target.ts';
import { clientIp, type Trust } from './client-ip.ts';
import { proxiedAddress } from './proxy-protocol.ts';

const CHALLENGE_PREFIX = '/.well-known/acme-challenge/';

export interface HttpListenerDeps {
  publicHttpsPort: number;
  /** the key authorisation for a token, or null (certificates plug in here) */
  challenge(token: string): Promise<string | null>;
  metrics: Metrics;
  log: Logger;
  trust: Trust;
}

export function createHttpHandler(deps: HttpListenerDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const port = deps.publicHttpsPort === 443 ? '' : `:${deps.publicHttpsPort}`;
  const access = accessLogger(deps.log);
  return (req, res) => {
    const started = performance.now();
    // read once checkTarget has taken an absolute-form target's authority for Host; '' before
    let hostname = '';
    // a count and an access line, as on the HTTPS listener: a failed HTTP-01 validation is looked for here
    const done = (route: 'acme' | 'redirect' | 'unknown') =>
      res.once('finish', () => {
        const ms = performance.now() - started;
        deps.metrics.answered(route, req.method, res.statusCode, ms / 1000);
        access?.({
          method: req.method,
          hostname,
          path: (req.url ?? '/').split('?', 1)[0],
          route,
          status: res.statusCode,
          durationMs: Math.round(ms * 10) / 10,
          clientIp: clientIp(proxiedAddress(req.socket)?.address ?? req.socket.remoteAddress ?? '', req.headers['x-forwarded-for'], deps.trust),
          protocol: req.httpVersion,
          accountId: undefined,
        });
      });
    // two Host fields → 400; an absolute-form target is rewritten to its path with Host = its authority
    const problem = checkTarget(req);
    if (problem !== null) {
      done('unknown');
      res.writeHead(400, { 'content-type': 'text/plain', connection: 'close' });
      res.end(`${problem}\n`);
      return;
    }
    hostname = hostnameFromHost(req.headers.host);
    const url = req.url ?? '/';
    if (url.startsWith(CHALLENGE_PREFIX)) {
      done('acme');
      const token = url.slice(CHALLENGE_PREFIX.length).split('?', 1)[0];
      deps.challenge(token).then(
        (answer) => {
          res.statusCode = answer === null ? 404 : 200;
          res.setHeader('content-type', 'text/plain');
          res.end(answer ?? 'no such challenge\n');
        },
        () => {
          res.statusCode = 503;
          res.end();
        },
      );
      return;
    }
    if (!hostname || !url.startsWith('/')) {
      done('unknown');
      res.statusCode = 400;
      res.setHeader('content-type', 'text/plain');
      res.end('a Host header naming this site is required\n');
      return;
    }
    done('redirect');
    const location = `https://${hostname.includes(':') ? `[${hostname}]` : hostname}${port}${url}`;
    afterReads(() => {
      res.writeHead(308, { location, 'content-type': 'text/plain', 'content-length': 0 });
      res.end();
    });
  };
}
