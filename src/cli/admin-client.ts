// The CLI's side of the admin API: one request, the Error body turned into a readable message.
import { cliSettings } from '../config.ts';
import { parseInteger } from './options.ts';

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

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function adminRequest(method: string, path: string, body?: Record<string, unknown>): Promise<any> {
  const { url, token, tokenFile } = cliSettings();
  if (!token) throw new AdminError(`no admin token: set PORTICO_ADMIN_TOKEN, or run this where ${tokenFile} exists (Portico writes it on first start)`, true);
  const timeoutMs = cliTimeoutMs();
  const clean = body && Object.fromEntries(Object.entries(body).filter(([, v]) => v !== undefined));
  const signal = AbortSignal.timeout(timeoutMs);
  const timedOut = () => new AdminError(`the admin API at ${url} did not answer within ${timeoutMs / 1000} s (PORTICO_CLI_TIMEOUT_MS)`, true);
  let response: Response;
  try {
    response = await fetch(new URL(path, url), {
      method,
      headers: { authorization: `Bearer ${token}`, ...(clean ? { 'content-type': 'application/json' } : {}) },
      body: clean ? JSON.stringify(clean) : undefined,
      // the bearer token must not travel to wherever a redirect points
      redirect: 'manual',
      signal,
    });
  } catch (err) {
    if (signal.aborted) throw timedOut();
    throw new AdminError(`cannot reach the admin API at ${url} (${(err as Error & { cause?: Error }).cause?.message ?? (err as Error).message}); is Portico running? (PORTICO_ADMIN_URL)`, true);
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
  try {
    answer = text ? JSON.parse(text) : null;
  } catch {
    throw new AdminError(`${response.status} ${response.statusText}: ${text.slice(0, 200)}`);
  }
  if (!response.ok) {
    const error = answer as { code?: string; message?: string } | null;
    throw new AdminError(`${response.status} ${error?.code ?? ''}: ${error?.message ?? text}`);
  }
  return answer;
}
