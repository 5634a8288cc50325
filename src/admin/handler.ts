// The admin listener: /healthz, /readyz, /metrics (no token) and /admin/* (bearer admin token).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { timingSafeEqual, createHash } from 'node:crypto';
import type { Config } from '../config.ts';
import { HttpError, sendError, sendJson } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { Stores } from '../state/types.ts';
import { readJsonObject } from '../api/body.ts';
import { fail } from '../edge/pipeline.ts';
import { accountView, createAccount, createKey, revokeKey, updateAccount } from './accounts.ts';

export interface AdminDeps {
  config: Config;
  adminToken: string;
  stores: Stores;
  metrics: Metrics;
  log: Logger;
  /** 'embedded' | 'ok' | 'degraded' | 'down', as /readyz reports it */
  readiness(): Promise<{ status: number; body: Record<string, string> }>;
}

type Params = Record<string, string>;
type AdminOperation = (req: IncomingMessage, params: Params) => Promise<{ status: number; body?: unknown }>;

const MAX_ADMIN_BODY = 64 * 1024;

export function createAdminHandler(deps: AdminDeps, options: { metricsOnly?: boolean } = {}): (req: IncomingMessage, res: ServerResponse) => void {
  const { config, stores, metrics, log } = deps;
  const expected = createHash('sha256').update(deps.adminToken).digest();
  const body = (req: IncomingMessage, optional = false) => readJsonObject(req, MAX_ADMIN_BODY, { optional });

  const routes: Array<[string, RegExp, AdminOperation]> = [
    ['POST', /^\/admin\/accounts$/, async (req) => ({ status: 201, body: await createAccount(await body(req), stores, config) })],
    ['GET', /^\/admin\/accounts\/(?<id>[^/]+)$/, async (_req, { id }) => {
      const account = await stores.accounts.get(id);
      if (!account) throw new HttpError('not_found', `No account ${id}.`);
      return { status: 200, body: accountView(account, config) };
    }],
    ['PATCH', /^\/admin\/accounts\/(?<id>[^/]+)$/, async (req, { id }) => ({ status: 200, body: await updateAccount(id, await body(req), stores, config) })],
    ['POST', /^\/admin\/keys$/, async (req) => ({ status: 201, body: await createKey(await body(req), stores) })],
    ['DELETE', /^\/admin\/keys\/(?<id>[^/]+)$/, async (_req, { id }) => {
      await revokeKey(id, stores);
      return { status: 204 };
    }],
  ];

  const authorised = (header: string | undefined): boolean => {
    const token = header?.startsWith('Bearer ') ? header.slice(7).trim() : '';
    return token !== '' && timingSafeEqual(createHash('sha256').update(token).digest(), expected);
  };

  return (req, res) => {
    const path = (req.url ?? '/').split('?', 1)[0];
    res.once('finish', () => metrics.httpRequests.inc({ route: 'admin', method: req.method ?? 'OTHER', status: res.statusCode }));
    if (req.method === 'GET' && path === '/healthz') return sendJson(res, 200, { status: 'ok' });
    if (req.method === 'GET' && path === '/readyz') {
      deps.readiness().then(({ status, body }) => sendJson(res, status, body), (err) => fail(res, err, log));
      return;
    }
    if (req.method === 'GET' && path === '/metrics') {
      metrics.registry.metrics().then((text) => {
        res.setHeader('content-type', metrics.registry.contentType);
        res.end(text);
      }, (err) => fail(res, err, log));
      return;
    }
    if (options.metricsOnly || !path.startsWith('/admin/')) return sendError(res, 'not_found');
    if (!authorised(req.headers.authorization)) {
      return sendError(res, 'unauthorized', 'The admin API needs "Authorization: Bearer <admin token>".', { 'www-authenticate': 'Bearer realm="portico-admin"' });
    }
    let pathMatched = false;
    for (const [method, pattern, operation] of routes) {
      const match = pattern.exec(path);
      if (!match) continue;
      pathMatched = true;
      if (method !== req.method) continue;
      const params = Object.fromEntries(Object.entries(match.groups ?? {}).map(([k, v]) => [k, decodeURIComponent(v)]));
      operation(req, params).then(
        ({ status, body }) => (status === 204 ? (res.writeHead(204), res.end()) : sendJson(res, status, body)),
        (err) => fail(res, err, log),
      );
      return;
    }
    sendError(res, pathMatched ? 'method_not_allowed' : 'not_found');
  };
}
