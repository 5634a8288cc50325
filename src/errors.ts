// One table: Error code → HTTP status → default message. Every Error body is written by sendError().
import type { ServerResponse } from 'node:http';
import type { Http2ServerResponse } from 'node:http2';

export type Response = ServerResponse | Http2ServerResponse;

/** name, value, name, value, …: what writeHead takes in one call */
export type HeaderList = Array<string | number>;

const JSON_TYPE = 'application/json; charset=utf-8';

export const ERRORS = {
  invalid_request: [400, 'The request is not valid.'],
  invalid_hostname: [400, 'The hostname is not valid.'],
  unauthorized: [401, 'A valid API key is required: send "Authorization: Bearer <key>".'],
  plan_required: [402, 'Custom domains need a paid plan.'],
  not_found: [404, 'Not found.'],
  method_not_allowed: [405, 'Method not allowed.'],
  misdirected_request: [421, 'This connection was opened for another hostname.'],
  conflict: [409, 'The request conflicts with the current state.'],
  payload_too_large: [413, 'The request body is too large.'],
  unsupported_media_type: [415, 'The request body must be JSON (Content-Type: application/json).'],
  rate_limited: [429, 'Rate limit exceeded.'],
  key_banned: [429, 'This key is temporarily banned for calling while rate limited.'],
  internal_error: [500, 'Internal error.'],
  not_implemented: [501, 'Not implemented.'],
  bad_gateway: [502, 'The upstream could not be reached.'],
  service_unavailable: [503, 'The service is temporarily unavailable.'],
  gateway_timeout: [504, 'The upstream did not answer in time.'],
} as const satisfies Record<string, readonly [number, string]>;

export type ErrorCode = keyof typeof ERRORS;

export interface ErrorBody {
  code: ErrorCode;
  message: string;
  status: number;
}

/** An error that carries its Error body; thrown by handlers, written by the pipeline. */
export class HttpError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly headers: Record<string, string>;
  constructor(code: ErrorCode, message?: string, headers: Record<string, string> = {}) {
    super(message ?? ERRORS[code][1]);
    this.code = code;
    this.status = ERRORS[code][0];
    this.headers = headers;
  }
}

export function errorBody(code: ErrorCode, message?: string): ErrorBody {
  return { code, message: message ?? ERRORS[code][1], status: ERRORS[code][0] };
}

export function sendError(res: Response, code: ErrorCode, message?: string, headers: Record<string, string> = {}): void {
  sendJson(res, ERRORS[code][0], errorBody(code, message), headers);
}

export function sendJson(res: Response, status: number, value: unknown, headers: Record<string, string> = {}): void {
  sendJsonText(res, status, value === undefined ? '' : JSON.stringify(value), headers);
}

/**
 * JSON that is already serialised (a cached answer, with its `byteLength` when known). Status and
 * headers go out in one writeHead; a HeaderList is extended in place, not copied. Headers set earlier
 * with setHeader are kept, those given here win.
 */
export function sendJsonText(res: Response, status: number, body: string, headers: Record<string, string> | HeaderList = {}, byteLength?: number): void {
  let list: HeaderList;
  if (Array.isArray(headers)) list = headers;
  else {
    list = [];
    for (const name in headers) list.push(name, headers[name]);
  }
  if (body) list.push('content-type', JSON_TYPE, 'content-length', byteLength ?? Buffer.byteLength(body));
  // Http2ServerResponse takes the same flat list (its types only admit strings)
  (res as ServerResponse).writeHead(status, list);
  res.end(body);
}
