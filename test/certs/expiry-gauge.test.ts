// Regression: the certificate gauges were read from the store once every 10 minutes, and the earliest
// expiry only set when a certificate existed. portico_certificates_earliest_expiry_timestamp_seconds
// read 0 from the start and for up to 10 minutes after the first certificate was issued (an alert on
// `expiry - time() < 7d` fired at once), portico_certificates{expires_in} did not count a new
// certificate, and a store emptied kept the old expiry. Now the gauges follow a certificate stored or
// removed within seconds, and the earliest expiry has no sample while no certificate is stored.
// Scraped over HTTP from a real Portico after a real issue from pebble.
import t from 'tap';
import { startPortico, cleanup } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';
import { parseExposition, promtoolCheck, requirePrometheus, scrape, sum } from '../helpers/prometheus.ts';
import { startAcmePeers } from '../helpers/acme-peers.ts';

requirePrometheus('promtool');
const { dns, upstream, pebble, env } = await startAcmePeers(t);
const portico = await startPortico(env);
t.teardown(async () => {
  await portico.stop();
  cleanup(portico.dataDir, portico.certsDir);
});

const EARLIEST = 'portico_certificates_earliest_expiry_timestamp_seconds';

interface Gauges { text: string; earliest: number[]; buckets: Record<string, number>; summarised: boolean }

async function gauges(): Promise<Gauges> {
  const text = await scrape(portico.ports.admin);
  const e = parseExposition(text);
  const buckets = Object.fromEntries(['lt7d', 'lt30d', 'ge30d'].map((b) => [b, sum(e, 'portico_certificates', { expires_in: b })]));
  return {
    text,
    earliest: e.samples.filter((s) => s.name === EARLIEST).map((s) => s.value),
    buckets,
    summarised: e.samples.some((s) => s.name === 'portico_certificates'),
  };
}

/** Scrapes until `ok` holds; 20 s is far below the 10 minutes the gauges used to lag. */
async function until(ok: (g: Gauges) => boolean): Promise<Gauges> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const g = await gauges();
    if (ok(g) || Date.now() > deadline) return g;
    await new Promise((r) => setTimeout(r, 200));
  }
}

t.test('expiry-gauge: no sample without certificates, the new certificate within seconds, none again once removed', async (t) => {
  const { ports } = portico;
  // the maintenance pass at start has read the (empty) store
  const empty = await until((g) => g.summarised);
  t.ok(empty.summarised, 'portico_certificates has its samples after the first maintenance pass');
  t.same(empty.earliest, [], `no ${EARLIEST} sample while no certificate is stored (it read 0)`);
  t.same(empty.buckets, { lt7d: 0, lt30d: 0, ge30d: 0 });
  t.match(empty.text, new RegExp(`^# TYPE ${EARLIEST} gauge$`, 'm'), 'the family is still described');
  const checked = promtoolCheck(empty.text);
  t.equal(checked.status, 0, `promtool check metrics: ${checked.output}`);

  const account = (await admin(ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const project = (await admin(ports.admin, 'POST', '/admin/projects', { accountId: account.id, name: 'gauges', upstream: upstream.url })).json;
  const hostname = 'gauge.example.com';
  const domainPath = `/admin/projects/${project.id}/domains/${hostname}`;
  await admin(ports.admin, 'POST', `/admin/projects/${project.id}/domains`, { hostname });
  await dns.setCname(hostname, 'edge.localhost');
  t.equal((await admin(ports.admin, 'POST', `${domainPath}/verify`)).json.status, 'verified');
  let certificate: { status: string; notAfter?: string } = { status: 'none' };
  for (let i = 0; i < 150 && certificate.status !== 'issued'; i++) {
    await new Promise((r) => setTimeout(r, 100));
    certificate = (await admin(ports.admin, 'GET', domainPath)).json.certificate;
  }
  t.equal(certificate.status, 'issued');

  const issued = await until((g) => g.earliest.length > 0 && g.buckets.ge30d === 1);
  t.same(issued.earliest, [Date.parse(certificate.notAfter!) / 1000], 'the earliest expiry is the new certificate\'s notAfter');
  t.same(issued.buckets, { lt7d: 0, lt30d: 0, ge30d: 1 }, 'and it is counted');

  t.equal((await admin(ports.admin, 'DELETE', domainPath)).status, 204);
  const removed = await until((g) => g.earliest.length === 0 && g.buckets.ge30d === 0);
  t.same(removed.earliest, [], 'no sample again once the last certificate is removed');
  t.same(removed.buckets, { lt7d: 0, lt30d: 0, ge30d: 0 });
});
