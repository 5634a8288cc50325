// The /v1 API served by Portico itself (DESIGN §4).
import type { Config } from '../config.ts';
import { HttpError, sendError, sendJsonText, type HeaderList, type Response } from '../errors.ts';
import type { Decision, RateLimiter } from '../ratelimit/limiter.ts';
import type { Account, Environment, Stores } from '../state/types.ts';
import type { Forwarder } from '../proxy/forward.ts';
import { createAuthenticator } from './auth.ts';
import { readJsonObject, type Request } from './body.ts';
import { parseCategoryId, parseIdempotencyKey, parseNewCategory } from './categories.ts';
import { limitFor } from './plans.ts';

export interface ApiRequest {
  environment: Environment;
  clientIp: string;
  path: string;
  query: string;
  /** filled in while the call runs; read by the access log when the answer is finished */
  outcome: ApiOutcome;
}

/** What the access log and metrics learn about an API call. */
export interface ApiOutcome {
  accountId?: string;
  plan?: string;
  decision?: Decision['reason'];
}

interface Call {
  req: Request;
  res: Response;
  request: ApiRequest;
  account: Account | null;
  params: string[];
  /** the limiter's decision: its X-RateLimit-* headers go on the answer */
  decision: Decision;
}

type Operation = (call: Call) => Promise<void>;

interface Resource {
  /** a path without parameters, or a pattern whose groups are the parameters */
  pattern: string | RegExp;
  methods: Record<string, Operation>;
  /** no key needed (counted per client IP) */
  public?: boolean;
  /** RFC 9745 Deprecation / RFC 8594 Sunset headers on every answer */
  deprecated?: boolean;
}

export interface ApiDeps {
  config: Config;
  stores: Stores;
  limiter: RateLimiter;
  forwarder: Forwarder;
  openapi: () => unknown;
  onAuthFailure(): void;
  onDecision(plan: string, decision: Decision['reason']): void;
}

export function createApi(deps: ApiDeps): (req: Request, res: Response, request: ApiRequest) => Promise<void> {
  const { config, stores, limiter } = deps;
  const authenticate = createAuthenticator(stores.keys);
  // what every /v1 answer carries from Portico (DESIGN §4): the upstream's copies do not replace them
  const OWN_FIELDS: ReadonlySet<string> = new Set(['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'retry-after', 'deprecation', 'sunset', 'link']);
  const forwardToUpstream: Operation = async ({ req, res, request, account, decision }) => {
    if (!config.api.upstream) throw new HttpError('not_found');
    // the forwarder writes the upstream's head: ours joins it from here
    setRateLimitHeaders(res, decision);
    // the path is kept whole (`/v1/pets/7`) below the upstream's own base path
    const url = new URL(request.path.slice(1) + request.query, withSlash(config.api.upstream));
    await deps.forwarder.forward(req, res, { origin: url.origin, path: url.pathname + url.search }, {
      'x-portico-account-id': account!.id,
      'x-portico-environment': request.environment,
      'x-forwarded-for': request.clientIp,
      'x-forwarded-proto': 'https',
    }, new Set(['authorization', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'forwarded']), undefined, OWN_FIELDS);
  };

  const resources: Resource[] = [
    {
      pattern: '/v1/categories',
      methods: {
        GET: async (call) => {
          const list = serialised(await stores.categories.list(call.request.environment));
          answer(call, 200, list.text, [], list.byteLength);
        },
        POST: async (call) => {
          const key = parseIdempotencyKey(call.req.headers['idempotency-key']);
          const fields = parseNewCategory(await readJsonObject(call.req, config.api.maxBodyBytes));
          const { environment } = call.request;
          const cap = config.api.maxCategories;
          // with a key, a retry (after a 503 whose write may have been applied, a lost answer) gets the
          // category its first use made, and makes none
          const created = key === null ? await stores.categories.create(environment, fields, cap) : await stores.categories.createOnce(environment, fields, cap, { accountId: call.account!.id, key });
          if (created === 'full') throw new HttpError('conflict', `This environment already holds the maximum of ${cap} categories.`);
          if (created === 'key_reused') throw new HttpError('conflict', 'This Idempotency-Key was used in the last 24 hours with another request body: use a new key for a new category.');
          const replayed = 'replayed' in created;
          const category = replayed ? created.replayed : created;
          answer(call, 201, JSON.stringify(category), ['location', `/v1/categories/${category.id}`, ...(replayed ? ['idempotent-replayed', 'true'] : [])]);
        },
      },
    },
    {
      pattern: /^\/v1\/categories\/([^/]+)$/,
      methods: {
        GET: async (call) => {
          const { params } = call;
          const id = parseCategoryId(params[0]);
          const category = id === null ? null : await stores.categories.get(call.request.environment, id);
          if (!category) throw new HttpError('not_found', `No category with id ${params[0]}.`);
          answer(call, 200, JSON.stringify(category));
        },
      },
    },
    { pattern: /^\/v1\/pets\/([^/]+)$/, methods: { GET: forwardToUpstream }, deprecated: true },
    { pattern: '/v1/store/orders', methods: { GET: forwardToUpstream } },
    { pattern: '/v1/openapi.json', methods: { GET: async (call) => answer(call, 200, JSON.stringify(deps.openapi())) }, public: true },
  ];
  const byPath = new Map<string, Resource>();
  for (const resource of resources) if (typeof resource.pattern === 'string') byPath.set(resource.pattern, resource);
  const byPattern = resources.filter((resource) => resource.pattern instanceof RegExp);

  // stores hand out the same list object until it changes: serialise each one once
  const json = new WeakMap<object, { text: string; byteLength: number }>();
  const serialised = (value: object): { text: string; byteLength: number } => {
    let body = json.get(value);
    if (body === undefined) {
      const text = JSON.stringify(value);
      json.set(value, (body = { text, byteLength: Buffer.byteLength(text) }));
    }
    return body;
  };

  // account → its limiter subject per environment; the store hands out one object per account until it changes
  const subjects: Record<Environment, WeakMap<Account, string>> = { production: new WeakMap(), staging: new WeakMap() };
  const subjectOf = (account: Account, environment: Environment): string => {
    let subject = subjects[environment].get(account);
    if (subject === undefined) subjects[environment].set(account, (subject = `${account.id}:${environment}`));
    return subject;
  };

  const deprecationHeaders = {
    deprecation: `@${Math.floor(Date.parse(config.api.pets.deprecatedAt) / 1000)}`,
    sunset: new Date(config.api.pets.sunsetAt).toUTCString(),
    link: `<${config.api.pets.link}>; rel="deprecation"; type="text/html"`,
  };

  // The order of operations for one /v1 call:
  // 1. match the path (public and deprecated resources are known before anything else);
  // 2. authenticate the key — anything but an active key of this environment is anonymous;
  // 3. count the call against the account's limit (anonymous: the client IP on the Free limits)
  //    and put X-RateLimit-* on the answer, whatever it turns out to be;
  // 4. refuse: 429 over the limit, 401 without a key, 404 unknown path, 405 wrong method;
  // 5. run the operation; its HttpError becomes the Error body.
  return async function handleApi(req, res, request) {
    const { outcome } = request;
    let resource = byPath.get(request.path);
    let params: string[] = NO_PARAMS;
    if (resource === undefined) {
      for (const candidate of byPattern) {
        const match = (candidate.pattern as RegExp).exec(request.path);
        if (match) {
          resource = candidate;
          params = match.slice(1).map(safeDecode);
          break;
        }
      }
    }
    if (resource?.deprecated) for (const [name, value] of Object.entries(deprecationHeaders)) res.setHeader(name, value);

    const isPublic = resource?.public === true;
    const key = isPublic ? null : await authenticate(req.headers.authorization, request.environment);
    const account = key ? await stores.accounts.get(key.accountId) : null;
    outcome.accountId = account?.id;
    outcome.plan = account?.plan ?? 'anonymous';

    const subject = account ? subjectOf(account, request.environment) : `ip:${request.clientIp}:${request.environment}`;
    const decision = await limiter.consume(subject, limitFor(account, config), config.ratelimit.ban);
    outcome.decision = decision.reason;
    deps.onDecision(outcome.plan, decision.reason);
    const method = req.method === 'HEAD' ? 'GET' : req.method!;
    // own properties only: an HTTP/2 :method may be any token, `toString` included
    const operation = resource && Object.hasOwn(resource.methods, method) ? resource.methods[method] : undefined;
    if (decision.allowed && (account || isPublic) && operation) {
      try {
        await operation({ req, res, request, account, params, decision });
      } catch (err) {
        // the Error body is written by the caller: with the same X-RateLimit-* headers
        if (!res.headersSent) setRateLimitHeaders(res, decision);
        throw err;
      }
      return;
    }

    setRateLimitHeaders(res, decision);
    if (!decision.allowed) {
      sendError(res, decision.reason === 'key_banned' ? 'key_banned' : 'rate_limited', undefined, { 'retry-after': String(decision.retryAfter) });
      return;
    }
    if (!account && !isPublic) {
      deps.onAuthFailure();
      sendError(res, 'unauthorized', undefined, { 'www-authenticate': 'Bearer realm="portico"' });
      return;
    }
    if (!resource) throw new HttpError('not_found', `No route for ${request.path}.`);
    throw new HttpError('method_not_allowed', `${req.method} is not allowed on ${request.path}.`, { allow: allowed(resource) });
  };
}

const NO_PARAMS: string[] = [];

/** An operation's answer: status, X-RateLimit-*, `headers` and the JSON body in one writeHead. */
function answer(call: Call, status: number, body: string, headers: HeaderList = [], byteLength?: number): void {
  const { decision } = call;
  headers.push('x-ratelimit-limit', decision.limit, 'x-ratelimit-remaining', decision.remaining, 'x-ratelimit-reset', decision.reset);
  sendJsonText(call.res, status, body, headers, byteLength);
}

function setRateLimitHeaders(res: Response, decision: Decision): void {
  res.setHeader('x-ratelimit-limit', decision.limit);
  res.setHeader('x-ratelimit-remaining', decision.remaining);
  res.setHeader('x-ratelimit-reset', decision.reset);
}

function allowed(resource: Resource): string {
  const methods = Object.keys(resource.methods);
  if (methods.includes('GET')) methods.push('HEAD');
  return methods.join(', ');
}

function withSlash(url: string): string {
  return url.endsWith('/') ? url : `${url}/`;
}

function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
