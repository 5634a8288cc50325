// The OpenAPI 3 description of /v1 as Portico implements it, served at GET /v1/openapi.json.
import type { Config } from '../config.ts';

const rateLimitHeaders = {
  'X-RateLimit-Limit': { description: 'Requests allowed in the reported window.', schema: { type: 'integer' } },
  'X-RateLimit-Remaining': { description: 'Requests left in the reported window.', schema: { type: 'integer' } },
  'X-RateLimit-Reset': { description: 'Unix time (seconds) when the reported window ends.', schema: { type: 'integer' } },
};

function errorResponse(description: string, extraHeaders: Record<string, unknown> = {}) {
  return {
    description,
    headers: { ...rateLimitHeaders, ...extraHeaders },
    content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
  };
}

function ok(description: string, schema: unknown, extraHeaders: Record<string, unknown> = {}) {
  return { description, headers: { ...rateLimitHeaders, ...extraHeaders }, content: { 'application/json': { schema } } };
}

export function openapiDocument(config: Config): unknown {
  const common = {
    '401': errorResponse('No active key for this environment.', { 'WWW-Authenticate': { schema: { type: 'string' } } }),
    '429': errorResponse('Rate limited or temporarily banned.', { 'Retry-After': { description: 'Whole seconds to wait.', schema: { type: 'integer', minimum: 1 } } }),
    '503': errorResponse('Shared state unreachable.', { 'Retry-After': { schema: { type: 'integer' } } }),
  };
  const categoryId = { name: 'id', in: 'path', required: true, schema: { type: 'integer', minimum: 1 } };
  return {
    openapi: '3.0.3',
    info: {
      title: 'Portico Petstore API',
      version: '1.0.0',
      description: 'Categories, pets and orders. Every response carries X-RateLimit-* headers.',
      license: { name: 'MIT', url: 'https://opensource.org/licenses/MIT' },
    },
    servers: [
      ...config.api.hosts.filter((h) => !/^[\d.]+$/.test(h)).slice(0, 1).map((h) => ({ url: base(h, config.https.publicPort), description: 'production' })),
      ...config.api.stagingHosts.slice(0, 1).map((h) => ({ url: base(h, config.https.publicPort), description: 'staging' })),
    ],
    security: [{ bearer: [] }],
    tags: [
      { name: 'categories', description: 'Pet categories, stored by Portico per environment.' },
      { name: 'pets', description: 'Pets, served by the upstream (deprecated).' },
      { name: 'store', description: 'Orders, served by the upstream.' },
    ],
    paths: {
      '/categories': {
        get: {
          operationId: 'listCategories',
          tags: ['categories'],
          summary: 'All categories in id order.',
          responses: { '200': ok('The categories.', { type: 'array', items: { $ref: '#/components/schemas/Category' } }), ...common },
        },
        post: {
          operationId: 'createCategory',
          tags: ['categories'],
          summary: 'Create a category.',
          parameters: [{
            name: 'Idempotency-Key',
            in: 'header',
            required: false,
            description: 'Makes a retry safe: within 24 hours, a request with the same key (per account and environment) and the same body gets the category the first one created, with Idempotent-Replayed: true, and creates none.',
            schema: { type: 'string', minLength: 1, maxLength: 255 },
          }],
          requestBody: { required: true, content: { 'application/json': { schema: { $ref: '#/components/schemas/NewCategory' } } } },
          responses: {
            '201': ok('Created (or, with an Idempotency-Key used before, the category that request created).', { $ref: '#/components/schemas/Category' }, { Location: { schema: { type: 'string' } }, 'Idempotent-Replayed': { description: 'true when the answer is the one an earlier request with this Idempotency-Key created', schema: { type: 'string', enum: ['true'] } } }),
            '400': errorResponse('The body is not a valid NewCategory, or the Idempotency-Key is not valid.'),
            '409': errorResponse(`The environment already holds ${config.api.maxCategories} categories, or the Idempotency-Key was used with another body in the last 24 hours.`),
            '413': errorResponse(`The body is larger than ${config.api.maxBodyBytes} bytes.`),
            '415': errorResponse('The body is not JSON.'),
            ...common,
          },
        },
      },
      '/categories/{id}': {
        get: {
          operationId: 'getCategory',
          tags: ['categories'],
          summary: 'One category.',
          parameters: [categoryId],
          responses: { '200': ok('The category.', { $ref: '#/components/schemas/Category' }), '404': errorResponse('No such category.'), ...common },
        },
      },
      '/pets/{petId}': {
        get: {
          operationId: 'getPet',
          tags: ['pets'],
          summary: 'One pet (deprecated).',
          deprecated: true,
          parameters: [{ name: 'petId', in: 'path', required: true, schema: { type: 'string' } }],
          responses: {
            '200': { description: 'The pet, from the upstream.', headers: { ...rateLimitHeaders, Deprecation: { schema: { type: 'string' } }, Sunset: { schema: { type: 'string' } } } },
            '404': errorResponse('No such pet, or no upstream configured.'),
            ...common,
          },
        },
      },
      '/store/orders': {
        get: {
          operationId: 'listOrders',
          tags: ['store'],
          summary: 'Orders, from the upstream.',
          responses: { '200': { description: 'The orders, from the upstream.', headers: rateLimitHeaders }, '404': errorResponse('No upstream configured.'), ...common },
        },
      },
    },
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'pk_live_… (production) or pk_test_… (staging)' } },
      schemas: {
        NewCategory: {
          type: 'object',
          required: ['name'],
          properties: { name: { type: 'string', minLength: 1, maxLength: 100 }, description: { type: 'string', maxLength: 1000 } },
        },
        Category: {
          type: 'object',
          required: ['id', 'name'],
          properties: { id: { type: 'integer', minimum: 1 }, name: { type: 'string' }, description: { type: 'string' } },
        },
        Error: {
          type: 'object',
          required: ['code', 'message', 'status'],
          properties: { code: { type: 'string' }, message: { type: 'string' }, status: { type: 'integer' } },
        },
      },
    },
  };
}

/** the API's base URL at a host, on the port clients use (PORTICO_PUBLIC_HTTPS_PORT, named unless 443) */
function base(host: string, port: number): string {
  const name = host.includes(':') ? `[${host}]` : host;
  return `https://${name}${port === 443 ? '' : `:${port}`}/v1`;
}
