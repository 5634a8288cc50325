// One request to check a target answers as the scenario expects, before it is measured.
import https from 'node:https';
import http from 'node:http';

export interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

export function get(opts: { scheme: 'http' | 'https'; port: number; hostname: string; path: string; headers?: Record<string, string>; method?: string; body?: string }): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const options = {
      host: '127.0.0.1',
      port: opts.port,
      path: opts.path,
      method: opts.method ?? 'GET',
      headers: { host: opts.hostname, ...opts.headers },
      agent: false as const,
    };
    const onResponse = (res: http.IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    };
    const req = opts.scheme === 'https'
      ? https.request({ ...options, servername: opts.hostname, rejectUnauthorized: false }, onResponse)
      : http.request(options, onResponse);
    req.setTimeout(10_000, () => req.destroy(new Error(`no answer from ${opts.hostname}:${opts.port}${opts.path}`)));
    req.on('error', reject);
    req.end(opts.body);
  });
}

export async function expectStatus(what: string, answer: Promise<Answer>, status: number): Promise<Answer> {
  const a = await answer;
  if (a.status !== status) throw new Error(`${what}: expected ${status}, got ${a.status}: ${a.body.toString().slice(0, 300)}`);
  return a;
}
