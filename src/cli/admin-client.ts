// The CLI's side of the admin API: one request, the Error body turned into a readable message.
import { cliSettings } from '../config.ts';

export class AdminError extends Error {}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function adminRequest(method: string, path: string, body?: Record<string, unknown>): Promise<any> {
  const { url, token, tokenFile } = cliSettings();
  if (!token) throw new AdminError(`no admin token: set PORTICO_ADMIN_TOKEN, or run this where ${tokenFile} exists (Portico writes it on first start)`);
  const clean = body && Object.fromEntries(Object.entries(body).filter(([, v]) => v !== undefined));
  let response: Response;
  try {
    response = await fetch(new URL(path, url), {
      method,
      headers: { authorization: `Bearer ${token}`, ...(clean ? { 'content-type': 'application/json' } : {}) },
      body: clean ? JSON.stringify(clean) : undefined,
    });
  } catch (err) {
    throw new AdminError(`cannot reach the admin API at ${url} (${(err as Error & { cause?: Error }).cause?.message ?? (err as Error).message}); is Portico running? (PORTICO_ADMIN_URL)`);
  }
  const text = await response.text();
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
