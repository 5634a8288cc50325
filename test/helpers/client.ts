// Real HTTPS (with SNI) and admin clients for tests.
import https from 'node:https';
import http from 'node:http';
import tls from 'node:tls';
import { ADMIN_TOKEN } from './portico.ts';

export interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any;
}

export interface RequestOptions {
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** SNI; defaults to the hostname */
  servername?: string;
  agent?: https.Agent | false;
  /** check the certificate for this name instead (hostnames only the fallback certificate answers for) */
  identity?: string;
}

function collect(res: http.IncomingMessage): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    res.on('data', (c) => chunks.push(c));
    res.on('error', reject);
    res.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      let json: unknown;
      try {
        json = text ? JSON.parse(text) : undefined;
      } catch {
        json = undefined;
      }
      resolve({ status: res.statusCode!, headers: res.headers, text, json });
    });
  });
}

/** HTTPS request to 127.0.0.1:port for `hostname` (Host header and SNI), trusting `ca`. */
export function request(port: number, hostname: string, ca: string, options: RequestOptions = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = https.request({
      host: '127.0.0.1',
      port,
      method: options.method ?? 'GET',
      path: options.path ?? '/',
      servername: options.servername ?? hostname,
      headers: { host: hostname, ...options.headers },
      ca,
      agent: options.agent ?? false,
      ...(options.identity ? { checkServerIdentity: (_host: string, cert: tls.PeerCertificate) => tls.checkServerIdentity(options.identity!, cert) } : {}),
    }, (res) => collect(res).then(resolve, reject));
    req.on('error', reject);
    req.end(options.body);
  });
}

export function api(port: number, ca: string, key: string | null, options: RequestOptions & { hostname?: string; json?: unknown } = {}): Promise<Answer> {
  const headers: Record<string, string> = { ...options.headers };
  if (key) headers.authorization = `Bearer ${key}`;
  let body = options.body;
  if (options.json !== undefined) {
    body = JSON.stringify(options.json);
    headers['content-type'] ??= 'application/json';
  }
  return request(port, options.hostname ?? 'api.localhost', ca, { ...options, headers, body });
}

/** Admin API call with the test admin token (or `token`). */
export function admin(port: number, method: string, path: string, body?: unknown, token: string | null = ADMIN_TOKEN): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
    const req = http.request({
      host: '127.0.0.1',
      port,
      method,
      path,
      headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(payload !== undefined ? { 'content-type': 'application/json' } : {}) },
    }, (res) => collect(res).then(resolve, reject));
    req.on('error', reject);
    req.end(payload);
  });
}

/** An account on `plan` and a key for it: the usual first two admin calls. */
export async function accountWithKey(adminPort: number, plan = 'pro', environment = 'production', limits?: { perMinute: number; perDay: number }) {
  const account = await admin(adminPort, 'POST', '/admin/accounts', { plan, ...(limits ? { limits } : {}) });
  if (account.status !== 201) throw new Error(`account: ${account.status} ${account.text}`);
  const key = await admin(adminPort, 'POST', '/admin/keys', { accountId: account.json.id, environment });
  if (key.status !== 201) throw new Error(`key: ${key.status} ${key.text}`);
  return { accountId: account.json.id as string, keyId: key.json.id as string, key: key.json.key as string };
}
