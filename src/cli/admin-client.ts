// The CLI's side of the admin API: one request, the Error body turned into a readable message.
import { cliSettings } from '../config.ts';
import { parseInteger, UsageError } from './options.ts';

/**
 * The call failed (exit 1). `fatal`: no other call can succeed either (no token, nothing answering,
 * a redirect), so a command making many calls stops at the first.
 */
export class AdminError extends Error {
  readonly fatal: boolean;
  constructor(message: string, fatal = false) {
    super(message);
    this.fatal = fatal;
  }
}

const DEFAULT_TIMEOUT_MS = 30_000;

/**
 * How long one call may take, connection to last byte: PORTICO_CLI_TIMEOUT_MS. Read here, beside
 * the call, because only the CLI has it; the admin API answers in milliseconds, so 30 s means it is
 * stuck (a process frozen, or a port that accepts and never answers).
 */
export function cliTimeoutMs(env: NodeJS.ProcessEnv = process.env): number {
  const text = env.PORTICO_CLI_TIMEOUT_MS?.trim();
  return text ? parseInteger('PORTICO_CLI_TIMEOUT_MS', text, { min: 1, max: 3_600_000 }) : DEFAULT_TIMEOUT_MS;
}

/**
 * The port visitors use (PORTICO_PUBLIC_HTTPS_PORT, as Portico's own redirects name it; unset: 443).
 * The admin API does not tell it, so it is read here, like the admin address, from the variable
 * Portico reads; read before a command sends anything, so a bad value changes nothing.
 */
export function publicHttpsPort(env: NodeJS.ProcessEnv = process.env): number {
  const text = env.PORTICO_PUBLIC_HTTPS_PORT?.trim();
  return text ? parseInteger('PORTICO_PUBLIC_HTTPS_PORT', text, { min: 1, max: 65_535 }) : 443;
}

/** https://hostname, with `:port` unless it is 443, the scheme's default */
export function httpsUrl(hostname: string, port: number): string {
  return `https://${hostname}${port === 443 ? '' : `:${port}`}`;
}

/**
 * PORTICO_ADMIN_URL, checked before anything is sent (a bad value is bad usage, exit 2): http://, or
 * https:// for a TLS proxy in front of the admin listener. A path is refused, not dropped: the admin
 * API answers only at /admin/… of its listener, and a prefix kept would meet Portico's 404 for an
 * unknown path, which reads like an unknown id. Credentials, a query or a fragment are refused too.
 */
export function adminBaseUrl(text: string): URL {
  let url: URL | null;
  try {
    url = new URL(text);
  } catch {
    url = null;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    // `localhost:9180` parses as the scheme "localhost:", `127.0.0.1:9180` as nothing at all
    const hint = /^(\[[0-9a-f:.]+\]|[^\s/:[\]@]+):[0-9]+(\/\S*)?$/i.test(text) ? `; did you mean http://${text}?` : '';
    throw new UsageError(`PORTICO_ADMIN_URL must be an http:// URL such as http://127.0.0.1:9180 (got ${JSON.stringify(text)})${hint}`);
  }
  // never repeated: the password would end up in a terminal's scrollback
  if (url.username || url.password) throw new UsageError('PORTICO_ADMIN_URL must not carry a user or password: the admin token goes in PORTICO_ADMIN_TOKEN');
  if (url.search || url.hash) throw new UsageError(`PORTICO_ADMIN_URL must not carry a query or a fragment (got ${JSON.stringify(text)})`);
  if (url.pathname !== '/') throw new UsageError(`PORTICO_ADMIN_URL must not have a path (got ${JSON.stringify(text)}): the admin API answers at /admin/… of its listener, such as ${url.origin}`);
  return url;
}

/** Portico's admin API answers every error with the Error body: anything else is another server. */
function isErrorBody(answer: unknown): answer is { code: string; message: string } {
  return typeof answer === 'object' && answer !== null && typeof (answer as { code?: unknown }).code === 'string' && typeof (answer as { message?: unknown }).message === 'string';
}

/** one line of a peer's or OpenSSL's words (OpenSSL's end in a newline, its source file and line) */
function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

function unreachable(url: string, err: Error & { cause?: Error & { code?: string; reason?: string } }): AdminError {
  const cause = err.cause;
  // a TLS hello answered by a plain HTTP server (the admin listener is one)
  if (cause?.code === 'ERR_SSL_WRONG_VERSION_NUMBER') {
    return new AdminError(`the admin API at ${url} does not answer TLS: Portico's admin API speaks plain HTTP (PORTICO_ADMIN_URL=${url.replace(/^https:/, 'http:')})`, true);
  }
  return new AdminError(`cannot reach the admin API at ${url} (${oneLine(cause?.reason ?? cause?.message ?? err.message)}); is Portico running? (PORTICO_ADMIN_URL)`, true);
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function adminRequest(method: string, path: string, body?: Record<string, unknown>): Promise<any> {
  const { url, token, tokenFile, tokenFrom } = cliSettings();
  const base = adminBaseUrl(url);
  if (!token) throw new AdminError(`no admin token: set PORTICO_ADMIN_TOKEN, or run this where ${tokenFile} exists (Portico writes it on first start)`, true);
  const timeoutMs = cliTimeoutMs();
  const clean = body && Object.fromEntries(Object.entries(body).filter(([, v]) => v !== undefined));
  const signal = AbortSignal.timeout(timeoutMs);
  const timedOut = () => new AdminError(`the admin API at ${url} did not answer within ${timeoutMs / 1000} s (PORTICO_CLI_TIMEOUT_MS)`, true);
  const target = new URL(path, base);
  let response: Response;
  try {
    response = await fetch(target, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(clean ? { 'content-type': 'application/json' } : {}) },
      body: clean ? JSON.stringify(clean) : undefined,
      // the bearer token must not travel to wherever a redirect points
      redirect: 'manual',
      signal,
    });
  } catch (err) {
    if (signal.aborted) throw timedOut();
    throw unreachable(url, err as Parameters<typeof unreachable>[1]);
  }
  if (response.status >= 300 && response.status < 400) {
    await response.body?.cancel();
    const location = response.headers.get('location') ?? '(no Location)';
    throw new AdminError(`the admin URL ${url} answered ${response.status}, a redirect to ${location}; not followed, so the admin token goes nowhere else. Is PORTICO_ADMIN_URL the admin listener (PORTICO_ADMIN_PORT)?`, true);
  }
  let text: string;
  try {
    text = await response.text();
  } catch (err) {
    if (signal.aborted) throw timedOut();
    throw new AdminError(`the admin API at ${url} broke off its answer (${(err as Error).message})`, true);
  }
  let answer: unknown = null;
  let json = true;
  try {
    answer = text ? JSON.parse(text) : null;
  } catch {
    json = false;
  }
  if (!json || (!response.ok && !isErrorBody(answer))) {
    const status = `${response.status}${response.statusText ? ` ${response.statusText}` : ''}`;
    const said = text ? `: ${oneLine(text).slice(0, 200)}` : ', no body';
    throw new AdminError(`${target} does not answer as Portico's admin API (${status}${said}); is PORTICO_ADMIN_URL the admin listener (PORTICO_ADMIN_PORT)?`, true);
  }
  if (response.status === 401) {
    // where the token came from, never the token: a stale admin-token file is the usual cause
    const source = tokenFrom !== tokenFile
      ? `${tokenFrom}; it is not the token this Portico uses (its own PORTICO_ADMIN_TOKEN or admin.token, else the admin-token file in its data dir)`
      : `${tokenFile}; a stale file is the usual cause (left by another start or data dir, while this Portico uses another token): set PORTICO_ADMIN_TOKEN, or PORTICO_DATA_DIR to this Portico's data dir`;
    throw new AdminError(`the admin API at ${url} refused the admin token (401 unauthorized) read from ${source}`, true);
  }
  if (!response.ok) {
    const error = answer as { code: string; message: string };
    throw new AdminError(`${response.status} ${error.code}: ${error.message}`);
  }
  return answer;
}
