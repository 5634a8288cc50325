// The admin listeners answer requests for an IP address, localhost or a name the operator listed. A
// web page whose name is re-pointed at the admin address (DNS rebinding) sends its own name as Host:
// it must not read /metrics, /readyz or the dashboard, nor call /admin/* with a token it guessed.
import t from 'tap';
import http from 'node:http';
import { ADMIN_TOKEN, startPortico } from '../helpers/portico.ts';
import { freePort } from '../helpers/free-port.ts';
import { adminHostAllowed } from '../../src/admin/handler.ts';

function get(port: number, path: string, host: string | null): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { authorization: `Bearer ${ADMIN_TOKEN}` };
    if (host !== null) headers.host = host;
    const req = http.request({ host: '127.0.0.1', port, path, headers, setHost: host !== null }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (c) => (body += c)).on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject).end();
  });
}

t.test('IP addresses, localhost and listed names, with and without a port', async (t) => {
  const listed = ['admin.internal.example'];
  for (const host of ['localhost', 'localhost:9180', 'LOCALHOST.', 'admin.localhost:9180', '127.0.0.1', '127.0.0.1:9180', '10.0.0.1:9180', '[::1]', '[::1]:9180', '[fd00::5]:9180', 'Admin.Internal.Example:9180', undefined, ''])
    t.ok(adminHostAllowed(host, listed), `${host} is answered`);
  for (const host of ['rebind.example', 'rebind.example:9180', '127.0.0.1.nip.io', 'localhost.example.com', 'internal.example', '[::1]x', '[rebind.example]:9180', '127.0.0.1:9180@evil', '[::1'])
    t.notOk(adminHostAllowed(host, listed), `${host} is refused`);
});

t.test('a name not listed gets 421 on every admin path; IP addresses and localhost are answered', async (t) => {
  const metricsPort = await freePort();
  const portico = await startPortico({ PORTICO_METRICS_PORT: String(metricsPort) });
  t.teardown(() => portico.stop());
  const port = portico.ports.admin;
  for (const path of ['/metrics', '/readyz', '/healthz', '/', '/admin/projects']) {
    const refused = await get(port, path, `rebind.example:${port}`);
    t.equal(refused.status, 421, `${path} for rebind.example`);
    t.equal(JSON.parse(refused.body).code, 'misdirected_request');
    t.match(JSON.parse(refused.body).message, /PORTICO_ADMIN_HOSTNAMES/);
    t.notMatch(refused.body, /portico_http|<html/i, 'nothing of the answer leaks');
  }
  t.equal((await get(metricsPort, '/metrics', `rebind.example:${metricsPort}`)).status, 421, 'the metrics listener too');
  for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, null]) {
    t.equal((await get(port, '/admin/projects', host)).status, 200, `/admin/projects for ${host}`);
    t.match((await get(port, '/metrics', host)).body, /portico_http_requests_total/, `/metrics for ${host}`);
  }
  t.equal((await get(metricsPort, '/metrics', `127.0.0.1:${metricsPort}`)).status, 200);
});

t.test('bound to every interface, a name in PORTICO_ADMIN_HOSTNAMES is answered and others are not', async (t) => {
  const portico = await startPortico({ PORTICO_ADMIN_HOST: '0.0.0.0', PORTICO_ADMIN_HOSTNAMES: 'admin.internal.example' });
  t.teardown(() => portico.stop());
  const port = portico.ports.admin;
  t.equal((await get(port, '/healthz', `admin.internal.example:${port}`)).status, 200);
  t.equal((await get(port, '/admin/projects', `ADMIN.internal.example.:${port}`)).status, 200);
  t.equal((await get(port, '/metrics', `rebind.example:${port}`)).status, 421);
});
