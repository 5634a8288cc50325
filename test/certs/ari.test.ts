// ACME Renewal Information (RFC 9773). pebble 2.4 offers none, so a small local server stands in
// front of it: it serves pebble's directory with a `renewalInfo` URL added and answers that URL with
// the RFC's JSON and a Retry-After; every other ACME request goes to pebble itself. Checked: the
// CertID against the certificate (openssl's reading of its AKI and serial), the renewal moment inside
// the suggested window, the Retry-After honoured, and `replaces` on the renewal's new order.
import t from 'tap';
import http from 'node:http';
import https from 'node:https';
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { webcrypto } from 'node:crypto';
import * as acme from 'acme-client';
import * as x509 from '@peculiar/x509';
import { certId, parseRenewalInfo, pickRenewalTime } from '../../src/certs/ari.ts';
import { createScheduler } from '../../src/domains/scheduler.ts';
import { createLogger } from '../../src/log.ts';
import { startManagerBed } from '../helpers/cert-manager.ts';
import { tempDir } from '../helpers/portico.ts';

t.test('CertID: RFC 9773 appendix A, leading zero of the serial kept', async (t) => {
  x509.cryptoProvider.set(webcrypto as never);
  const algorithm = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
  const keys = (await webcrypto.subtle.generateKey(algorithm, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: '0087654321', name: 'CN=ari.test', keys, signingAlgorithm: algorithm,
    notBefore: new Date(), notAfter: new Date(Date.now() + 86_400_000),
    extensions: [new x509.AuthorityKeyIdentifierExtension('69885b6b87464041e1b37b847ba0ae2cde01c8d4')],
  });
  t.equal(certId(cert.toString('pem')), 'aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE');
});

t.test('the window: a random moment inside it; a past window means now; a bad one is ignored', async (t) => {
  const window = parseRenewalInfo({ suggestedWindow: { start: '2026-01-01T00:00:00Z', end: '2026-01-03T00:00:00Z' }, explanationURL: 'https://ca.test/why' });
  t.same(window, { start: Date.parse('2026-01-01T00:00:00Z'), end: Date.parse('2026-01-03T00:00:00Z'), explanationURL: 'https://ca.test/why' });
  const now = Date.parse('2025-12-01T00:00:00Z');
  t.equal(pickRenewalTime(window!, now, () => 0), window!.start);
  t.equal(pickRenewalTime(window!, now, () => 0.5), Date.parse('2026-01-02T00:00:00Z'));
  const inside = Date.parse('2026-01-02T00:00:00Z');
  t.ok(pickRenewalTime(window!, inside, () => 0) >= inside, 'never in the past while the window lasts');
  t.equal(pickRenewalTime(window!, Date.parse('2026-02-01T00:00:00Z')), Date.parse('2026-02-01T00:00:00Z'), 'a window that has passed: at once');
  t.equal(parseRenewalInfo({ suggestedWindow: { start: '2026-01-03T00:00:00Z', end: '2026-01-01T00:00:00Z' } }), null, 'end before start (§4.2)');
  t.equal(parseRenewalInfo({ suggestedWindow: { start: 'soon' } }), null);
});

t.test('renewal by the CA\'s window, through a directory that offers renewalInfo', async (t) => {
  const requests: string[] = [];
  let answer = { window: { start: 0, end: 0 }, retryAfter: '21600' };
  let pebbleDirectory = '';
  const ca = { pem: '' };
  const server = http.createServer((req, res) => {
    if (req.url === '/dir') {
      https.get(pebbleDirectory, { ca: ca.pem }, (upstream) => {
        let body = '';
        upstream.on('data', (chunk) => { body += chunk; });
        upstream.on('end', () => {
          const directory = { ...JSON.parse(body), renewalInfo: `http://127.0.0.1:${(server.address() as { port: number }).port}/renewal-info` };
          res.setHeader('content-type', 'application/json');
          res.end(JSON.stringify(directory));
        });
      });
      return;
    }
    const id = /^\/renewal-info\/([\w-]+\.[\w-]+)$/.exec(req.url ?? '')?.[1];
    if (id === undefined) {
      res.statusCode = 404;
      res.end();
      return;
    }
    requests.push(id);
    res.setHeader('content-type', 'application/json');
    res.setHeader('retry-after', answer.retryAfter);
    res.end(JSON.stringify({ suggestedWindow: { start: new Date(answer.window.start).toISOString(), end: new Date(answer.window.end).toISOString() } }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());

  const bed = await startManagerBed({
    directory: async (pebble) => {
      pebbleDirectory = pebble.directoryUrl;
      ca.pem = pebble.caCertPem;
      return `http://127.0.0.1:${(server.address() as { port: number }).port}/dir`;
    },
  });
  t.teardown(() => bed.stop());
  const { manager, stores, certs, pebble, clock } = bed;
  const scheduler = createScheduler({ store: stores.schedule, log: createLogger('silent'), now: () => clock.ms });
  manager.useScheduler(scheduler);

  // the payloads of new orders, as signed and sent (acme-client's documented axios instance)
  const newOrders: Array<Record<string, unknown>> = [];
  const hook = acme.axios.interceptors.request.use((config) => {
    const jws = config.data as { payload?: string } | undefined;
    if (config.url?.includes('order-plz') && jws?.payload) newOrders.push(JSON.parse(Buffer.from(jws.payload, 'base64url').toString()));
    return config;
  });
  t.teardown(() => acme.axios.interceptors.request.eject(hook));

  const day = 86_400_000;
  answer = { window: { start: clock.ms + 10 * day, end: clock.ms + 12 * day }, retryAfter: '21600' };
  await bed.addVerified('ari.example.org');
  const first = await manager.obtain('ari.example.org', 'verified');
  t.ok(first, 'issued');
  await manager.idle();
  const stored = await certs.certificates.get('ari.example.org');
  t.ok(stored?.ari, 'the renewal was planned from the CA\'s renewal information');

  // the CertID the CA was asked about, against openssl's reading of the certificate
  const pemFile = path.join(tempDir('ari'), 'leaf.pem');
  writeFileSync(pemFile, first!.certPem);
  const text = execFileSync('openssl', ['x509', '-in', pemFile, '-noout', '-serial', '-ext', 'authorityKeyIdentifier'], { encoding: 'utf8' });
  const serialHex = /serial=([0-9A-F]+)/.exec(text)![1];
  const serialDer = Buffer.from(serialHex.length % 2 ? `0${serialHex}` : serialHex, 'hex');
  const serial = serialDer[0] & 0x80 ? Buffer.concat([Buffer.from([0]), serialDer]) : serialDer;
  const aki = Buffer.from(/([0-9A-F]{2}(:[0-9A-F]{2})+)/.exec(text.split('Authority Key Identifier')[1])![1].replaceAll(':', ''), 'hex');
  const expected = `${aki.toString('base64url')}.${serial.toString('base64url')}`;
  t.same(requests, [expected], 'GET <renewalInfo>/<base64url(AKI keyIdentifier)>.<base64url(serial)>');
  t.equal(stored!.ari!.certId, expected);
  t.ok(stored!.ari!.renewAt >= answer.window.start && stored!.ari!.renewAt < answer.window.end, 'the renewal moment is inside the suggested window');
  t.equal(stored!.ari!.pollAt, clock.ms + 21_600_000, 'asked again when Retry-After says (6 h)');
  const planned = (await stores.domains.events('ari.example.org')).find((e) => e.type === 'renewal_scheduled');
  t.match(planned, { details: { ari: true }, message: /inside the window the CA suggests/ });
  t.same(newOrders.map((o) => o.replaces), [undefined], 'a first order replaces nothing');

  // before Retry-After: nothing; after it the CA is asked again and now wants it replaced at once
  clock.ms += 3_600_000;
  await scheduler.runDue();
  t.equal(requests.length, 1, 'not asked again before Retry-After');
  answer = { window: { start: clock.ms - 2 * day, end: clock.ms - day }, retryAfter: '3600' };
  clock.ms += 6 * 3_600_000;
  const orders = pebble.orders();
  await scheduler.runDue();
  await scheduler.runDue();
  t.equal(requests[1], expected, 'asked again about it once Retry-After had passed');
  t.equal(pebble.orders(), orders + 1, 'the CA\'s past window: renewed at once');
  const renewed = (await certs.certificates.get('ari.example.org'))!;
  t.not(renewed.certPem, first!.certPem, 'a new certificate is stored');
  t.equal(newOrders.at(-1)?.replaces, expected, 'the new order names the certificate it replaces');
  t.ok(await manager.secureContext('ari.example.org'), 'and the next handshake gets it');

  // a window that starts after the certificate has expired is not followed: it would lapse first
  answer = { window: { start: clock.ms + 20 * 365 * day, end: clock.ms + 21 * 365 * day }, retryAfter: '86400' };
  await bed.addVerified('late.example.org');
  await manager.obtain('late.example.org', 'verified');
  await manager.idle();
  const late = (await certs.certificates.get('late.example.org'))!;
  const lateEvent = (await stores.domains.events('late.example.org')).find((e) => e.type === 'renewal_scheduled');
  t.match(lateEvent?.message, /after the certificate's expiry .*in the last third of its lifetime/, 'the timeline says the CA\'s window is not followed, and why');
  const notBefore = Date.parse(late.notBefore);
  const notAfter = Date.parse(late.notAfter);
  t.ok(Date.parse(String(lateEvent?.details?.renewAt)) < notAfter, `renewal planned before expiry (${lateEvent?.details?.renewAt}, expires ${late.notAfter})`);
  clock.ms = notAfter - (notAfter - notBefore) / 4;
  await scheduler.runDue();
  await scheduler.runDue();
  const renewedLate = (await stores.domains.events('late.example.org')).filter((e) => e.type === 'certificate_issued' && /^Renewed/.test(e.message));
  // at least once: the new certificate is dated by pebble's (real) clock, so at this test's clock it is
  // itself in its last third, and a second runDue may renew it again
  t.ok(renewedLate.length >= 1, `renewed in the last third of its lifetime, before it expired (${renewedLate.length})`);
  t.not((await certs.certificates.get('late.example.org'))!.certPem, late.certPem, 'a new certificate is stored');
});
