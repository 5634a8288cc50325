// The admin listener's fixed pages (/healthz, /readyz, /metrics, the dashboard) take HEAD wherever GET
// works and answer other methods 405 with Allow, as /admin/* does (a load balancer checking health with
// HEAD got 404 and took the instance out). And a request's method, which the visitor makes up, never
// becomes a label of its own: made-up methods on the HTTPS, HTTP and admin listeners all count as OTHER
// (each had grown portico_http_requests_total by one series per method).
import t from 'tap';
import http from 'node:http';
import http2 from 'node:http2';
import { startPortico } from '../helpers/portico.ts';
import { parseExposition, scrape } from '../helpers/prometheus.ts';
import { METHOD_LABELS } from '../../src/metrics.ts';

const portico = await startPortico();
t.teardown(() => portico.stop());
const { ports, ca } = portico;

function call(port: number, method: string, path: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (c) => (body += c)).on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject).end();
  });
}

t.test('HEAD works wherever GET does, without a body; other methods get 405 with Allow', async (t) => {
  for (const path of ['/healthz', '/readyz', '/metrics', '/']) {
    const got = await call(ports.admin, 'GET', path);
    const head = await call(ports.admin, 'HEAD', path);
    t.equal(head.status, got.status, `HEAD ${path}: ${got.status}, as GET`);
    t.equal(head.body, '', `HEAD ${path}: no body`);
    t.equal(head.headers['content-type'], got.headers['content-type'], `HEAD ${path}: the same content type`);
    for (const method of ['POST', 'DELETE', 'PUT']) {
      const refused = await call(ports.admin, method, path);
      t.equal(refused.status, 405, `${method} ${path} → 405`);
      t.equal(refused.headers.allow, 'GET, HEAD');
      t.equal(JSON.parse(refused.body).code, 'method_not_allowed');
    }
  }
  t.equal((await call(ports.admin, 'GET', '/nothing')).status, 404, 'an unknown path is still 404');
});

t.test('made-up methods count as OTHER on every listener', async (t) => {
  const made = Array.from({ length: 30 }, (_, i) => `MADEUP${i}X`);
  // the HTTPS listener over HTTP/2: refused before routing (a Host naming another site than :authority)
  const session = http2.connect(`https://127.0.0.1:${ports.https}`, { ca, servername: 'localhost', checkServerIdentity: () => undefined });
  session.on('error', () => undefined);
  for (const method of made) {
    await new Promise<void>((resolve) => {
      const stream = session.request({ ':method': method, ':path': '/', ':authority': 'localhost', host: 'elsewhere.localhost' });
      stream.on('error', () => undefined);
      stream.on('close', () => resolve());
      stream.resume();
      stream.end();
    });
  }
  session.close();
  // the HTTP listener and the admin listener (Node's parser takes only the methods it knows)
  for (const method of ['PROPFIND', 'MKCOL', 'LOCK', 'PURGE', 'SEARCH']) {
    await call(ports.http, method, '/');
    await call(ports.admin, method, '/admin/projects');
  }
  const methods = new Set(parseExposition(await scrape(ports.admin)).samples.filter((s) => s.name === 'portico_http_requests_total').map((s) => s.labels.method));
  t.ok(methods.has('OTHER'), 'they are counted, as OTHER');
  t.same([...methods].filter((m) => m !== 'OTHER' && !METHOD_LABELS.includes(m)), [], `no other method label (${[...methods].join(', ')})`);
});
