// Renewal for real: pebble issues certificates valid for a few seconds (certificateValidityPeriod),
// and Portico, left alone, replaces each in the last third of its lifetime and serves the new one over
// TLS for its SNI — no clock injected, no button pressed.
import t from 'tap';
import tls from 'node:tls';
import { X509Certificate } from 'node:crypto';
import { startPortico } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startPebble } from '../helpers/pebble.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { freePort } from '../helpers/free-port.ts';
import { admin } from '../helpers/client.ts';

const VALIDITY_SECONDS = 12;

t.test('a short-lived certificate is renewed by itself and the new one is served', async (t) => {
  const dns = await startChalltestsrv();
  t.teardown(() => dns.stop());
  const upstream = await startUpstream();
  t.teardown(() => upstream.stop());
  const httpPort = await freePort();
  const pebble = await startPebble({ httpPort, dnsServer: dns.dnsServer, certificateValidityPeriod: VALIDITY_SECONDS });
  t.teardown(() => pebble.stop());
  await dns.addA('edge.localhost', ['127.0.0.1']);
  const portico = await startPortico({ PORTICO_HTTP_PORT: String(httpPort), PORTICO_DNS_SERVERS: dns.dnsServer, PORTICO_ACME_DIRECTORY: pebble.directoryUrl, NODE_EXTRA_CA_CERTS: pebble.caCertFile });
  t.teardown(() => portico.stop());
  const account = (await admin(portico.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const project = (await admin(portico.ports.admin, 'POST', '/admin/projects', { accountId: account.id, name: 'live', upstream: upstream.url })).json;
  await admin(portico.ports.admin, 'POST', `/admin/projects/${project.id}/domains`, { hostname: 'live.example.com' });
  await dns.setCname('live.example.com', 'edge.localhost');
  await admin(portico.ports.admin, 'POST', `/admin/projects/${project.id}/domains/live.example.com/verify`);
  const root = await pebble.rootPem();

  const served = () => new Promise<X509Certificate>((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: portico.ports.https, servername: 'live.example.com', ca: root, ALPNProtocols: ['http/1.1'] }, () => {
      resolve(socket.getPeerX509Certificate()!);
      socket.end();
    });
    socket.on('error', reject);
  });
  const until = async <T>(what: string, probe: () => Promise<T | null>, ms: number): Promise<T> => {
    const deadline = Date.now() + ms;
    for (;;) {
      const value = await probe().catch(() => null);
      if (value !== null) return value;
      if (Date.now() > deadline) throw new Error(`${what}\n${portico.logs.slice(-8).join('\n')}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  };

  const first = await until('first certificate', async () => {
    const leaf = await served();
    return leaf.subject.includes('Portico fallback') ? null : leaf;
  }, 15_000);
  const lifetime = first.validToDate.getTime() - first.validFromDate.getTime();
  t.comment(`pebble issued ${first.validFrom} → ${first.validTo}`);
  t.ok(lifetime <= (VALIDITY_SECONDS + 1) * 1000, `a ${lifetime / 1000} s certificate`);
  const orders = pebble.orders();
  const second = await until('a renewed certificate', async () => {
    const leaf = await served();
    return leaf.serialNumber !== first.serialNumber ? leaf : null;
  }, 3 * VALIDITY_SECONDS * 1000);
  t.ok(pebble.orders() > orders, 'a new order was placed without anyone asking');
  t.ok(second.validToDate > first.validToDate, 'the new certificate outlives the old');
  t.ok(second.validFromDate < first.validToDate, 'it was issued before the old one expired');
  const events = (await admin(portico.ports.admin, 'GET', `/admin/projects/${project.id}/domains/live.example.com/events`)).json as Array<{ type: string; details?: { renewal?: boolean } }>;
  t.ok(events.some((e) => e.type === 'renewal_scheduled'), 'the timeline shows the planned renewal');
  t.ok(events.some((e) => e.type === 'certificate_issued' && e.details?.renewal), 'and the renewal');
});
