// The admin listener: /healthz, /readyz, /metrics (no token) and /admin/* (bearer admin token).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { timingSafeEqual, createHash } from 'node:crypto';
import net from 'node:net';
import type { Config } from '../config.ts';
import { HttpError, sendError, sendJson, sendJsonText } from '../errors.ts';
import { accessLogger, type Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import type { Stores } from '../state/types.ts';
import { readJsonObject } from '../api/body.ts';
import { fail } from '../edge/pipeline.ts';
import { accountView, createAccount, createKey, onlyKeys, revokeKey, updateAccount } from './accounts.ts';
import { createProject, getProject, projectDetail, projectView, updateProject } from './projects.ts';
import { domainView, type DomainRegistry } from '../domains/registry.ts';
import { hostnameFromHost } from '../routing/hostname.ts';
import { dashboardCsp, dashboardPage } from './dashboard.ts';
import { answerable, domainName, DOMAIN_STATUSES, HEALTHS, hostnameInput, pathParams, queryFilter, quoted, shown } from './input.ts';

export interface AdminDeps {
  config: Config;
  adminToken: string;
  stores: Stores;
  domains: DomainRegistry;
  metrics: Metrics;
  log: Logger;
  /** 'embedded' | 'ok' | 'degraded' | 'down', as /readyz reports it */
  readiness(): Promise<{ status: number; body: Record<string, string> }>;
  /** re-reads the configuration; rejects with `problems` when it cannot apply */
  reload(): Promise<void>;
  /** the process's one cache of admin answers (adminAnswers); handlers built again at a reload share it */
  lastAnswers: LastAnswers;
}

/**
 * The admin answers of the process: made once and subscribed to change notices once (a reload builds
 * the handlers again; each subscribing anew kept every earlier handler reachable, two per reload).
 */
export function adminAnswers(stores: Stores): LastAnswers {
  const answers = new LastAnswers();
  stores.events.subscribe(() => answers.forgetAll());
  return answers;
}

type Params = Record<string, string>;
type AdminOperation = (req: IncomingMessage, params: Params) => Promise<{ status: number; body?: unknown }>;

const MAX_ADMIN_BODY = 64 * 1024;

/**
 * Whether the admin listeners answer a request for this Host: one naming an IP address (any port),
 * `localhost` or a name under it (browsers keep those on loopback), a name the operator listed in
 * `admin.hostnames`, or none (HTTP/1.0 tools). A web page whose name an attacker re-points at the
 * admin address (DNS rebinding) sends its own name as Host and is refused.
 */
export function adminHostAllowed(host: string | undefined, hostnames: readonly string[]): boolean {
  if (host === undefined || host === '') return true;
  if (host.startsWith('[')) {
    const end = host.indexOf(']');
    return end > 0 && net.isIPv6(host.slice(1, end)) && /^(:\d*)?$/.test(host.slice(end + 1));
  }
  const name = host.replace(/:\d*$/, '').toLowerCase().replace(/\.$/, '');
  return net.isIPv4(name) || name === 'localhost' || name.endsWith('.localhost') || hostnames.includes(name);
}
/** the admin reads answered last, kept for a Redis outage: how many, and their bytes together */
const SEEN_MAX = 256;
const SEEN_MAX_BYTES = 8 * 1024 * 1024;

/**
 * The last answer of each admin read (DESIGN §8: a read an instance has answered once keeps answering
 * while Redis cannot be reached). It answers only when the read fails because the state is
 * unreachable. Any change — a notice from any instance, a write through this one — drops every
 * answer, and a read that began before it is not kept: a removed domain or a deleted redirect never
 * comes back from one.
 */
export class LastAnswers {
  #answers = new Map<string, { status: number; text: string }>();
  #bytes = 0;
  #version = 0;

  forgetAll(): void {
    this.#version++;
    this.#answers.clear();
    this.#bytes = 0;
  }

  async answer(path: string, read: () => Promise<{ status: number; body?: unknown }>): Promise<{ status: number; text: string }> {
    const version = this.#version;
    try {
      const { status, body } = await read();
      const text = body === undefined ? '' : JSON.stringify(body);
      if (version === this.#version) this.#keep(path, { status, text });
      return { status, text };
    } catch (err) {
      const last = (err as { code?: string }).code === 'STATE_UNAVAILABLE' ? this.#answers.get(path) : undefined;
      if (last) return last;
      throw err;
    }
  }

  #keep(path: string, answer: { status: number; text: string }): void {
    const before = this.#answers.get(path);
    if (before) this.#bytes -= before.text.length;
    this.#answers.delete(path);
    if (answer.text.length > SEEN_MAX_BYTES) return;
    this.#answers.set(path, answer);
    this.#bytes += answer.text.length;
    while (this.#answers.size > SEEN_MAX || this.#bytes > SEEN_MAX_BYTES) {
      const [oldest, dropped] = this.#answers.entries().next().value!;
      this.#answers.delete(oldest);
      this.#bytes -= dropped.text.length;
    }
  }
}

export function createAdminHandler(deps: AdminDeps, options: { metricsOnly?: boolean } = {}): (req: IncomingMessage, res: ServerResponse) => void {
  const { config, stores, metrics, log, domains } = deps;
  const project = (id: string) => getProject(id, stores);
  // a project and a hostname of it from the path (a name no domain can have is refused here, quoted safely)
  const named = async (id: string, hostname: string) => {
    const found = await project(id);
    return { found, hostname: domainName(hostname, found.name) };
  };
  const expected = createHash('sha256').update(deps.adminToken).digest();
  const body = (req: IncomingMessage, optional = false) => readJsonObject(req, MAX_ADMIN_BODY, { optional });
  const { lastAnswers } = deps;
  const access = accessLogger(log);

  const routes: Array<[string, RegExp, AdminOperation]> = [
    ['POST', /^\/admin\/accounts$/, async (req) => ({ status: 201, body: await createAccount(await body(req), stores, config) })],
    ['GET', /^\/admin\/accounts\/(?<id>[^/]+)$/, async (_req, { id }) => {
      const account = await stores.accounts.get(id);
      if (!account) throw new HttpError('not_found', `No account ${shown(id)}.`);
      return { status: 200, body: accountView(account, config) };
    }],
    ['PATCH', /^\/admin\/accounts\/(?<id>[^/]+)$/, async (req, { id }) => ({ status: 200, body: await updateAccount(id, await body(req), stores, config) })],
    ['POST', /^\/admin\/keys$/, async (req) => ({ status: 201, body: await createKey(await body(req), stores) })],
    ['DELETE', /^\/admin\/keys\/(?<id>[^/]+)$/, async (_req, { id }) => {
      await revokeKey(id, stores);
      return { status: 204 };
    }],
    ['POST', /^\/admin\/reload$/, async (req) => {
      onlyKeys(await body(req, true), []);
      try {
        await deps.reload();
      } catch (err) {
        const problems = (err as { problems?: string[] }).problems ?? [(err as Error).message];
        throw new HttpError('invalid_request', `The configuration was not reloaded: ${problems.join('; ')}`);
      }
      return { status: 200, body: { status: 'reloaded' } };
    }],
    ['POST', /^\/admin\/projects$/, async (req) => ({ status: 201, body: await createProject(await body(req), stores, config) })],
    ['GET', /^\/admin\/projects$/, async (req) => {
      const accountId = queryFilter(new URL(req.url ?? '/', 'http://admin').searchParams, 'accountId');
      const all = await stores.projects.list();
      return { status: 200, body: all.filter((p) => !accountId || p.accountId === accountId).map((p) => projectView(p, config)) };
    }],
    ['GET', /^\/admin\/projects\/(?<id>[^/]+)$/, async (_req, { id }) => ({ status: 200, body: await projectDetail(await project(id), stores, config) })],
    ['PATCH', /^\/admin\/projects\/(?<id>[^/]+)$/, async (req, { id }) => ({ status: 200, body: await updateProject(id, await body(req), stores, config) })],
    ['POST', /^\/admin\/projects\/(?<id>[^/]+)\/domains$/, async (req, { id }) => {
      const input = await body(req);
      onlyKeys(input, ['hostname']);
      return { status: 201, body: domainView(await domains.add(await project(id), hostnameInput(input.hostname))) };
    }],
    ['GET', /^\/admin\/projects\/(?<id>[^/]+)\/domains$/, async (req, { id }) => {
      const query = new URL(req.url ?? '/', 'http://admin').searchParams;
      const filters = { status: queryFilter(query, 'status', DOMAIN_STATUSES), health: queryFilter(query, 'health', HEALTHS) };
      const list = await domains.list(await project(id), filters);
      return { status: 200, body: list.map(domainView) };
    }],
    ['GET', /^\/admin\/projects\/(?<id>[^/]+)\/domains\/(?<hostname>[^/]+)$/, async (_req, params) => {
      const { found, hostname } = await named(params.id, params.hostname);
      return { status: 200, body: domainView(await domains.get(found, hostname)) };
    }],
    ['GET', /^\/admin\/projects\/(?<id>[^/]+)\/domains\/(?<hostname>[^/]+)\/events$/, async (_req, params) => {
      const { found, hostname } = await named(params.id, params.hostname);
      return { status: 200, body: await domains.events(found, hostname) };
    }],
    ['POST', /^\/admin\/projects\/(?<id>[^/]+)\/domains\/(?<hostname>[^/]+)\/verify$/, async (req, params) => {
      onlyKeys(await body(req, true), []);
      const { found, hostname } = await named(params.id, params.hostname);
      return { status: 200, body: domainView(await domains.verify(found, hostname)) };
    }],
    ['POST', /^\/admin\/projects\/(?<id>[^/]+)\/domains\/(?<hostname>[^/]+)\/reverify$/, async (req, params) => {
      onlyKeys(await body(req, true), []);
      const { found, hostname } = await named(params.id, params.hostname);
      return { status: 200, body: domainView(await domains.reverify(found, hostname)) };
    }],
    ['PATCH', /^\/admin\/projects\/(?<id>[^/]+)\/domains\/(?<hostname>[^/]+)$/, async (req, params) => {
      const input = await body(req);
      onlyKeys(input, ['primary', 'hsts']);
      const { found, hostname } = await named(params.id, params.hostname);
      return { status: 200, body: domainView(await domains.patch(found, hostname, input)) };
    }],
    ['DELETE', /^\/admin\/projects\/(?<id>[^/]+)\/domains\/(?<hostname>[^/]+)$/, async (_req, params) => {
      const { found, hostname } = await named(params.id, params.hostname);
      await domains.remove(found, hostname);
      return { status: 204 };
    }],
    ['POST', /^\/admin\/projects\/(?<id>[^/]+)\/redirects$/, async (req, { id }) => {
      const input = await body(req);
      onlyKeys(input, ['from', 'to', 'status']);
      const found = await project(id);
      if (typeof input.from === 'string') domainName(input.from, found.name);
      return { status: 201, body: await domains.addRedirect(found, input) };
    }],
    ['DELETE', /^\/admin\/projects\/(?<id>[^/]+)\/redirects\/(?<from>[^/]+)$/, async (_req, params) => {
      const { found, hostname } = await named(params.id, params.from);
      await domains.removeRedirect(found, hostname);
      return { status: 204 };
    }],
  ];

  const authorised = (header: string | undefined): boolean => {
    // the scheme is case-insensitive (RFC 9110 §11.1), as on /v1
    const token = header && /^bearer +/i.test(header) ? header.slice(header.indexOf(' ')).trim() : '';
    return token !== '' && timingSafeEqual(createHash('sha256').update(token).digest(), expected);
  };

  return (req, res) => {
    const path = (req.url ?? '/').split('?', 1)[0];
    const started = performance.now();
    res.once('finish', () => metrics.answered('admin', req.method, res.statusCode, (performance.now() - started) / 1000));
    if (!adminHostAllowed(req.headers.host, config.admin.hostnames)) {
      return sendError(res, 'misdirected_request', `The admin listener answers requests for an IP address, localhost, or a name in PORTICO_ADMIN_HOSTNAMES, not ${quoted(req.headers.host ?? '')}.`);
    }
    // the fixed pages: HEAD wherever GET works (a load balancer's health check may use it; Node leaves
    // the body out), any other method 405, as on /admin/*
    const read = req.method === 'GET' || req.method === 'HEAD';
    if (!read && (path === '/healthz' || path === '/readyz' || path === '/metrics' || (path === '/' && !options.metricsOnly))) {
      return sendError(res, 'method_not_allowed', `${req.method} is not allowed on ${path}.`, { allow: 'GET, HEAD' });
    }
    if (read && path === '/healthz') return sendJson(res, 200, { status: 'ok' });
    if (read && path === '/readyz') {
      deps.readiness().then(({ status, body }) => sendJson(res, status, body), (err) => fail(res, err, log));
      return;
    }
    if (read && path === '/metrics') {
      metrics.text().then((text) => {
        res.setHeader('content-type', metrics.registry.contentType);
        res.end(text);
      }, (err) => fail(res, err, log));
      return;
    }
    if (!options.metricsOnly && read && path === '/') {
      // the page holds no data: it asks for the admin token and calls /admin/* with it
      res.writeHead(200, {
        'content-type': 'text/html; charset=utf-8',
        'content-security-policy': dashboardCsp(),
        'cache-control': 'no-store',
        'x-content-type-options': 'nosniff',
        'referrer-policy': 'no-referrer',
      });
      res.end(req.method === 'HEAD' ? undefined : dashboardPage());
      return;
    }
    if (options.metricsOnly || !path.startsWith('/admin/')) return sendError(res, 'not_found');
    // every admin answer, refusals too: it holds an account's data or a key shown once, so no cache keeps
    // it, and it is read as JSON only (as the page itself is served)
    res.setHeader('cache-control', 'no-store');
    res.setHeader('x-content-type-options', 'nosniff');
    // an access line for each admin API call, refused ones too (health checks and scrapes have none)
    if (access) {
      const started = performance.now();
      res.once('finish', () => access({ method: req.method, hostname: hostnameFromHost(req.headers.host), path, route: 'admin', status: res.statusCode, durationMs: Math.round((performance.now() - started) * 10) / 10, clientIp: req.socket.remoteAddress ?? '', protocol: req.httpVersion, accountId: undefined }));
    }
    if (!authorised(req.headers.authorization)) {
      return sendError(res, 'unauthorized', 'The admin API needs "Authorization: Bearer <admin token>".', { 'www-authenticate': 'Bearer realm="portico-admin"' });
    }
    const allowed: string[] = [];
    for (const [method, pattern, operation] of routes) {
      const match = pattern.exec(path);
      if (!match) continue;
      allowed.push(method);
      // HEAD is GET without the body (Node's response leaves it out)
      if (method !== req.method && !(method === 'GET' && req.method === 'HEAD')) continue;
      let params: Params;
      try {
        params = pathParams(match.groups ?? {});
      } catch (err) {
        return fail(res, err, log);
      }
      if (method === 'GET') {
        // the query is part of what was read (?status=, ?accountId=)
        lastAnswers.answer(req.url ?? path, () => operation(req, params)).then(({ status, text }) => sendJsonText(res, status, text), (err) => fail(res, answerable(err), log));
        return;
      }
      // a write may change what any read answered, also one that failed (Redis may have applied it)
      lastAnswers.forgetAll();
      operation(req, params).finally(() => lastAnswers.forgetAll()).then(
        ({ status, body }) => (status === 204 ? (res.writeHead(204), res.end()) : sendJson(res, status, body)),
        (err) => fail(res, answerable(err), log),
      );
      return;
    }
    if (allowed.length === 0) return sendError(res, 'not_found');
    if (allowed.includes('GET')) allowed.push('HEAD');
    sendError(res, 'method_not_allowed', undefined, { allow: allowed.join(', ') });
  };
}
