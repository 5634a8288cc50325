// What one issue() call of the ACME issuer saw on the wire, and the IssueError a failure becomes.
// acme-client throws plain Errors carrying only the problem's `detail`, so the problem `type`
// (RFC 8555 §6.7) and Retry-After are read off the responses themselves: the client's axios
// instance (`acme.axios`, its documented HTTP hook) gets interceptors that act only inside an
// issue() call of the issuer that added them (AsyncLocalStorage), which also carry the `ca` trust per request.
import type { AsyncLocalStorage } from 'node:async_hooks';
import https from 'node:https';
import * as acme from 'acme-client';
import { IssueError, PROBLEM, problemKind } from './issue-error.ts';
import { retryAfterSeconds } from './ari.ts';
import type { LookTrace } from './acme-poll.ts';

// one ACME request; without it axios waits forever on a CA that accepted the connection
const REQUEST_TIMEOUT_MS = 30_000;

interface Problem {
  type: string;
  detail: string;
  retryAfterSeconds?: number;
}

/** What one issue() call saw on the wire. */
export interface Trace extends LookTrace {
  agent: https.Agent;
  problem?: Problem;
}

export function traceRequests(traces: AsyncLocalStorage<Trace>, onOrderCreated: () => void): void {
  acme.axios.interceptors.request.use((config) => {
    const trace = traces.getStore();
    if (trace === undefined) return config;
    config.httpsAgent = trace.agent;
    config.timeout = REQUEST_TIMEOUT_MS;
    // acme-client retries 429, 5xx and transport errors itself, sleeping out Retry-After (hours
    // for a rate limit) inside issue() and holding the caller's lock; a spent attempt counter
    // turns that off, so a failure comes back at once and the caller's backoff decides.
    return Object.assign(config, { retryAttempt: Number.POSITIVE_INFINITY });
  });
  acme.axios.interceptors.response.use((response) => {
    const trace = traces.getStore();
    if (trace === undefined) return response;
    const data: unknown = response.data;
    trace.status = response.status;
    if (response.status === 201 && isObject(data) && typeof data.finalize === 'string') onOrderCreated();
    // badNonce is retried by acme-client itself (RFC 8555 §6.5): not the reason for a failure
    if (response.status >= 400 && isProblem(data) && data.type !== `${PROBLEM}badNonce`) {
      trace.problem = { type: data.type, detail: data.detail ?? '', retryAfterSeconds: retryAfterSeconds(response.headers['retry-after'], Date.now()) };
    } else if (isObject(data) && data.status === 'invalid') {
      // an invalid challenge or order carries the reason in `error`, an invalid authorisation in the
      // `error` of its failed challenge
      const error = isProblem(data.error) ? data.error : Array.isArray(data.challenges) ? data.challenges.map((c: unknown) => (isObject(c) ? c.error : undefined)).find(isProblem) : undefined;
      if (error !== undefined) trace.problem = { type: error.type, detail: error.detail ?? '' };
    }
    return response;
  });
}

export function newTrace(ca: string[] | undefined): Trace {
  const agent = new https.Agent({ keepAlive: true, ...(ca === undefined ? {} : { ca }) });
  const trace: Trace = { agent };
  // axios loses a transport error (refused, TLS verification) once retries are off: keep it here
  const createConnection = agent.createConnection.bind(agent);
  agent.createConnection = ((...args: Parameters<typeof createConnection>) => {
    const socket = createConnection(...args);
    socket?.once('error', (err: Error) => { trace.transportError ??= err; });
    return socket;
  }) as typeof agent.createConnection;
  return trace;
}

export function classify(err: unknown, trace: Trace, doing: string, directoryUrl: string): IssueError {
  if (err instanceof IssueError) return err;
  const { problem, transportError } = trace;
  if (problem !== undefined) {
    return new IssueError(problemKind(problem.type), `${doing}: ${problem.detail || problem.type}`, {
      problemType: problem.type, retryAfterSeconds: problem.retryAfterSeconds, cause: err,
    });
  }
  if (transportError !== undefined) {
    return new IssueError('ca', `${doing}: talking to ${directoryUrl}: ${transportError.message}`, { cause: transportError });
  }
  if (err instanceof TypeError && /reading 'config'/.test(err.message)) {
    // acme-client's retry path drops a request error that never reached a socket (a failed DNS lookup)
    return new IssueError('ca', `${doing}: could not reach the CA at ${directoryUrl}`, { cause: err });
  }
  return new IssueError('ca', `${doing}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

function isProblem(value: unknown): value is { type: string; detail?: string } {
  return isObject(value) && typeof value.type === 'string';
}
