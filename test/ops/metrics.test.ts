// /metrics (DESIGN §7): the catalogue on a live Portico after real traffic, valid for
// `promtool check metrics`, scraped by a real Prometheus, on PORTICO_METRICS_PORT too, and with label
// sets that do not grow with the number of domains.
import t from 'tap';
import http from 'node:http';
import { startPortico, cleanup, type Instance } from '../helpers/portico.ts';
import { admin, api, request, accountWithKey } from '../helpers/client.ts';
import { freePort } from '../helpers/free-port.ts';
import { startUpstream, closedPort } from '../helpers/upstream.ts';
import { httpGet, parseExposition, promtoolCheck, scrape, startPrometheus, sum, type Exposition } from '../helpers/prometheus.ts';

const ROUTES = new Set(['api', 'project', 'redirect', 'acme', 'unknown', 'admin']);

const CATALOGUE: Array<[name: string, type: string]> = [
  ['portico_http_requests_total', 'counter'],
  ['portico_http_request_duration_seconds', 'histogram'],
  ['portico_upstream_errors_total', 'counter'],
  ['portico_ratelimit_decisions_total', 'counter'],
  ['portico_auth_failures_total', 'counter'],
  ['portico_tls_handshakes_total', 'counter'],
  ['portico_sni_cache_hits_total', 'counter'],
  ['portico_sni_cache_misses_total', 'counter'],
  ['portico_acme_orders_total', 'counter'],
  ['portico_acme_order_duration_seconds', 'histogram'],
  ['portico_certificates_earliest_expiry_timestamp_seconds', 'gauge'],
  ['portico_certificates', 'gauge'],
  ['portico_domains', 'gauge'],
  ['portico_redis_up', 'gauge'],
  ['portico_redis_command_errors_total', 'counter'],
];

const DEFAULTS = ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'process_start_time_seconds', 'nodejs_heap_size_used_bytes', 'nodejs_eventloop_lag_seconds', 'nodejs_version_info'];

/** TYPE names the family: a counter's samples carry `_total`, but prom-client's TYPE line does too. */
const typeOf = (e: Exposition, name: string) => e.types.get(name) ?? e.types.get(name.replace(/_total$/, ''));
const hasHelp = (e: Exposition, name: string) => e.helps.has(name) || e.helps.has(name.replace(/_total$/, ''));

const metricsPort = await freePort();
const upstream = await startUpstream();
const deadUpstream = `http://127.0.0.1:${await closedPort()}`;
const portico: Instance = await startPortico({ PORTICO_METRICS_PORT: String(metricsPort) });
const { ports, ca } = portico;
t.teardown(async () => {
  await portico.stop();
  await upstream.stop();
  cleanup(portico.dataDir, portico.certsDir);
});

// --- traffic: /v1 200/401/429, a project (200, and 502 from an upstream that refuses), a redirect
// on plain HTTP, an unknown host, and the admin API
const SECRET_HOST = 'metricsshop';
const owner = await accountWithKey(ports.admin, 'pro');
const tight = await accountWithKey(ports.admin, 'enterprise', 'production', { perMinute: 2, perDay: 100 });
const shop = await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: SECRET_HOST, upstream: upstream.url });
const broken = await admin(ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: 'metricsbroken', upstream: deadUpstream });

t.test('traffic of every kind is answered as expected', async (t) => {
  t.equal(shop.status, 201, `project ${SECRET_HOST} created`);
  t.equal(broken.status, 201, 'project metricsbroken created');
  t.equal((await api(ports.https, ca, owner.key, { path: '/v1/categories' })).status, 200);
  t.equal((await api(ports.https, ca, owner.key, { path: '/v1/categories/424242' })).status, 404);
  t.equal((await api(ports.https, ca, null, { path: '/v1/categories' })).status, 401);
  t.equal((await api(ports.https, ca, 'pk_live_notakeyatall', { path: '/v1/categories' })).status, 401);
  const tightStatuses: number[] = [];
  for (let i = 0; i < 3; i++) tightStatuses.push((await api(ports.https, ca, tight.key, { path: '/v1/categories' })).status);
  t.same(tightStatuses, [200, 200, 429]);
  const proxied = await request(ports.https, `${SECRET_HOST}.localhost`, ca, { path: '/echo?secret=1', identity: 'localhost' });
  t.equal(proxied.status, 200);
  t.equal(proxied.json.url, '/echo?secret=1');
  t.equal((await request(ports.https, 'metricsbroken.localhost', ca, { path: '/echo', identity: 'localhost' })).status, 502);
  t.equal((await request(ports.https, 'nobody-here.localhost', ca, { path: '/x', identity: 'localhost' })).status, 404);
  const redirected = await httpGet(`http://127.0.0.1:${ports.http}/some/path`);
  t.equal(redirected.status, 308);
});

t.test('GET /metrics on the admin port has the whole catalogue and the default process metrics', async (t) => {
  const text = await scrape(ports.admin);
  const e = parseExposition(text);
  for (const [name, type] of CATALOGUE) {
    t.equal(typeOf(e, name), type, `# TYPE ${name} ${type}`);
    t.ok(hasHelp(e, name), `# HELP ${name}`);
  }
  for (const name of DEFAULTS) t.ok(e.samples.some((s) => s.name === name), `default metric ${name} (unprefixed)`);
  t.notOk(e.samples.some((s) => s.name.startsWith('portico_process_') || s.name.startsWith('portico_nodejs_')), 'defaults are not prefixed');

  // the counters this traffic must have moved
  t.ok(sum(e, 'portico_http_requests_total', { route: 'api', method: 'GET', status: '200' }) >= 3, 'api 200');
  t.ok(sum(e, 'portico_http_requests_total', { route: 'api', method: 'GET', status: '401' }) >= 2, 'api 401');
  t.ok(sum(e, 'portico_http_requests_total', { route: 'api', method: 'GET', status: '429' }) >= 1, 'api 429');
  t.ok(sum(e, 'portico_http_requests_total', { route: 'project', method: 'GET', status: '200' }) >= 1, 'project 200');
  t.ok(sum(e, 'portico_http_requests_total', { route: 'project', method: 'GET', status: '502' }) >= 1, 'project 502');
  t.ok(sum(e, 'portico_http_requests_total', { route: 'unknown', status: '404' }) >= 1, 'unknown 404');
  t.ok(sum(e, 'portico_http_requests_total', { route: 'redirect', status: '308' }) >= 1, 'http → https redirect');
  t.ok(sum(e, 'portico_http_requests_total', { route: 'admin', method: 'POST', status: '201' }) >= 4, 'admin calls');
  t.ok(sum(e, 'portico_http_request_duration_seconds_count', { route: 'api' }) >= 3, 'duration histogram per route');
  t.ok(e.samples.some((s) => s.name === 'portico_http_request_duration_seconds_bucket' && s.labels.route === 'project' && s.labels.le === '+Inf'), 'histogram buckets with le');
  // every answer counted is timed too: the admin and HTTP listeners' answers were counted, never timed
  for (const route of ['api', 'project', 'unknown', 'redirect', 'admin']) {
    const counted = sum(e, 'portico_http_requests_total', { route });
    const timed = sum(e, 'portico_http_request_duration_seconds_count', { route });
    t.ok(counted > 0 && timed === counted, `${route}: ${counted} answers counted, ${timed} timed`);
  }
  t.ok(sum(e, 'portico_upstream_errors_total') >= 1, 'upstream error counted');
  t.ok(e.samples.some((s) => s.name === 'portico_upstream_errors_total' && s.labels.kind), 'upstream errors carry kind');
  t.ok(sum(e, 'portico_auth_failures_total') >= 2, 'auth failures');
  t.ok(sum(e, 'portico_ratelimit_decisions_total', { plan: 'enterprise' }) >= 3, 'limiter decisions for the enterprise plan');
  t.ok(e.samples.some((s) => s.name === 'portico_ratelimit_decisions_total' && s.labels.plan === 'enterprise' && s.value >= 1 && s.labels.decision !== 'allowed'), 'a refusal decision');
  t.ok(sum(e, 'portico_tls_handshakes_total', { result: 'success' }) >= 8, 'handshakes');
  t.ok(sum(e, 'portico_sni_cache_hits_total') + sum(e, 'portico_sni_cache_misses_total') >= 0, 'sni cache counters present');
  t.ok(e.samples.some((s) => s.name === 'portico_redis_up'), 'portico_redis_up has a value (0 in embedded mode)');
  t.equal(sum(e, 'portico_redis_up'), 0, 'embedded mode: no Redis');
  t.ok(e.samples.some((s) => s.name === 'portico_redis_command_errors_total'), 'unlabelled counters print 0');

  // labels come from small fixed sets: never a hostname, path or key
  for (const s of e.samples.filter((s) => s.name.startsWith('portico_') && s.labels.route !== undefined)) {
    t.ok(ROUTES.has(s.labels.route), `route label ${s.labels.route} is one of the fixed set`);
  }
  const labelValues = e.samples.filter((s) => s.name.startsWith('portico_')).flatMap((s) => Object.values(s.labels));
  const leaks = labelValues.filter((v) => v.includes('/') || v.includes('localhost') || v.includes('pk_') || v.includes('.') && !/^[\d.e+-]+$|^\+Inf$/.test(v));
  t.same(leaks, [], 'no label value looks like a hostname, path or key');
  for (const secret of [SECRET_HOST, 'metricsbroken', 'nobody-here', '/echo', '/some/path', owner.key, tight.key, 'pk_live_notakeyatall']) {
    t.notOk(text.includes(secret), `the scrape does not mention ${secret}`);
  }
});

t.test('promtool check metrics passes on the live scrape', async (t) => {
  const text = await scrape(ports.admin);
  const result = promtoolCheck(text);
  // promtool exits 1 when the text does not parse, 3 for lint problems, 0 when clean
  t.not(result.status, 1, `the exposition parses\n${result.output}`);
  t.notMatch(result.output, /portico_/, `no problem with Portico's own metrics\n${result.output}`);
  t.equal(result.status, 0, `promtool check metrics exits 0 (every metric, the defaults too):\n${result.output}`);
});

t.test('PORTICO_METRICS_PORT serves /metrics, /healthz, /readyz and nothing of /admin', async (t) => {
  t.equal(ports.metrics, metricsPort, 'the metrics listener is on the configured port');
  const metrics = await httpGet(`http://127.0.0.1:${metricsPort}/metrics`);
  t.equal(metrics.status, 200);
  t.match(metrics.headers['content-type'], /^text\/plain/);
  const e = parseExposition(metrics.text);
  for (const [name] of CATALOGUE) t.ok(typeOf(e, name), `${name} on the metrics port`);
  t.ok(e.samples.some((s) => s.name === 'process_cpu_seconds_total'));
  const checked = promtoolCheck(metrics.text);
  t.equal(checked.status, 0, `promtool check metrics passes there too:\n${checked.output}`);
  const healthz = await httpGet(`http://127.0.0.1:${metricsPort}/healthz`);
  t.equal(healthz.status, 200);
  t.equal(JSON.parse(healthz.text).status, 'ok');
  const readyz = await httpGet(`http://127.0.0.1:${metricsPort}/readyz`);
  t.equal(readyz.status, 200);
  for (const path of ['/admin/accounts', '/admin/projects', '/admin/reload', '/']) {
    const answer = await new Promise<number>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port: metricsPort, path, method: path === '/admin/reload' ? 'POST' : 'GET', agent: false, headers: { authorization: 'Bearer test-admin-token-0123456789' } }, (res) => {
        res.resume();
        resolve(res.statusCode!);
      });
      req.on('error', reject);
      req.end();
    });
    t.equal(answer, 404, `${path} is not served on the metrics port, even with the admin token`);
  }
});

t.test('a real Prometheus scrapes Portico: up == 1 and the request counters recorded', async (t) => {
  const prometheus = await startPrometheus('portico', [`127.0.0.1:${ports.admin}`]);
  t.teardown(() => prometheus.stop());
  const deadline = Date.now() + 20_000;
  let up: string | undefined;
  while (Date.now() < deadline) {
    const result = await prometheus.query('up{job="portico"}').catch(() => []);
    up = result[0]?.value[1];
    if (up === '1') break;
    await new Promise((r) => setTimeout(r, 250));
  }
  t.equal(up, '1', `up{job="portico"} == 1 within 20 s\n${prometheus.logs.join('')}`);
  let requests: Awaited<ReturnType<typeof prometheus.query>> = [];
  while (Date.now() < deadline + 5_000) {
    requests = await prometheus.query('portico_http_requests_total{job="portico"}');
    if (requests.length > 0) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  t.ok(requests.length > 0, 'portico_http_requests_total has samples in Prometheus');
  t.ok(requests.some((r) => r.metric.route === 'api' && r.metric.status === '200' && Number(r.value[1]) >= 3), 'with the api 200s');
  const scrapeOk = await prometheus.query('scrape_samples_scraped{job="portico"}');
  t.ok(Number(scrapeOk[0]?.value[1] ?? 0) > 50, 'every sample of the scrape ingested');
});

t.test('label sets stay bounded as domains grow (20 → 200 project hostnames)', async (t) => {
  const account = await accountWithKey(ports.admin, 'pro');
  const names = Array.from({ length: 200 }, (_, i) => `p${i}`);
  for (let i = 0; i < names.length; i += 20) {
    const created = await Promise.all(names.slice(i, i + 20).map((name) => admin(ports.admin, 'POST', '/admin/projects', { accountId: account.accountId, name, upstream: upstream.url })));
    for (const c of created) if (c.status !== 201) t.fail(`project: ${c.status} ${c.text}`);
  }
  const visit = async (batch: string[]) => {
    const answers = await Promise.all(batch.map((name) => request(ports.https, `${name}.localhost`, ca, { path: `/echo?n=${name}`, identity: 'localhost' })));
    for (const [i, a] of answers.entries()) if (a.status !== 200) t.fail(`${batch[i]}.localhost answered ${a.status}`);
  };
  const seriesCount = async () => {
    const e = parseExposition(await scrape(ports.admin));
    return { count: e.samples.filter((s) => s.name.startsWith('portico_')).length, e };
  };
  await visit(names.slice(0, 20));
  await seriesCount(); // the scrape's own admin series exists from here on
  const after20 = await seriesCount();
  for (let i = 20; i < names.length; i += 30) await visit(names.slice(i, i + 30));
  const after200 = await seriesCount();
  t.equal(after200.count, after20.count, `portico_* series: ${after20.count} after 20 hostnames, ${after200.count} after 200`);
  t.ok(sum(after200.e, 'portico_http_requests_total', { route: 'project', status: '200' }) >= 201, 'all 200 requests counted');
  const text = await scrape(ports.admin);
  t.notOk(/p1\d\d\.localhost|"p\d+"/.test(text), 'no project hostname appears');
});
