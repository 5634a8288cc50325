// Certificate stores, both backends (the certs dir; a real redis-server): the renewal index hands a
// sweep only the certificates whose renewal window has opened, follows renewals and removals, and
// the expiry summary counts what is stored. No PEM is parsed here: the stores keep them as given.
import t, { type Test } from 'tap';
import { appendFileSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { openFileCertStores } from '../../src/certs/file-store.ts';
import { openRedisCertStores } from '../../src/certs/redis-store.ts';
import { renewalOpens, type CertificateStore, type StoredCertificate } from '../../src/certs/types.ts';
import { cleanup, tempDir } from '../helpers/portico.ts';
import { commandsOn, startRedis } from '../helpers/redis.ts';

const DAY = 86_400_000;
const NOW = Date.parse('2026-06-01T12:00:00.000Z');
const iso = (ms: number) => new Date(ms).toISOString();

/** a 90-day certificate with `left` ms to go at NOW */
const certificate = (hostname: string, left: number): StoredCertificate => ({
  hostname,
  certPem: `-----BEGIN CERTIFICATE-----\n${hostname}\n-----END CERTIFICATE-----\n`,
  keyPem: 'key',
  notBefore: iso(NOW + left - 90 * DAY),
  notAfter: iso(NOW + left),
  issuer: 'Test CA',
});

const server = await startRedis();
t.teardown(() => server.stop());
const commands = commandsOn(server.url, t);
const redis = commands.client;

const backends: Array<{ name: string; open(t: Test): Promise<{ store: CertificateStore; certsDir?: string }> }> = [
  {
    name: 'files',
    async open(t) {
      const certsDir = tempDir('cert-store');
      t.teardown(() => cleanup(certsDir));
      return { store: openFileCertStores(certsDir, 'https://ca.test/directory').certificates, certsDir };
    },
  },
  {
    name: 'redis',
    async open() {
      await redis.flushall();
      return { store: openRedisCertStores(commands, 'https://ca.test/directory').certificates };
    },
  },
];

for (const backend of backends) {
  t.test(backend.name, async (t) => {
    t.test('due: only certificates whose renewal window has opened; renewals and removals follow', async (t) => {
      const { store } = await backend.open(t);
      // the window opens 33 days before the end of a 90-day certificate (the last third plus the jitter's 1/30)
      await store.put(certificate('soon.example', 20 * DAY));
      await store.put(certificate('edge.example', 33 * DAY - 1000));
      await store.put(certificate('later.example', 34 * DAY));
      await store.put(certificate('far.example', 80 * DAY));
      t.equal(renewalOpens(certificate('x', 33 * DAY).notBefore, certificate('x', 33 * DAY).notAfter), NOW, 'the window of a certificate with 33 days left opens now');
      const names = async (until = NOW) => (await store.due(until)).map((v) => v.hostname).sort();
      t.same(await names(), ['edge.example', 'soon.example']);
      t.same((await store.due(NOW)).find((v) => v.hostname === 'soon.example'), { hostname: 'soon.example', notBefore: certificate('soon.example', 20 * DAY).notBefore, notAfter: certificate('soon.example', 20 * DAY).notAfter });
      t.same(await names(NOW + 2 * DAY), ['edge.example', 'later.example', 'soon.example'], 'a day later, one more');

      await store.put(certificate('soon.example', 90 * DAY)); // renewed
      t.same(await names(), ['edge.example'], 'a renewed certificate leaves the due list');
      await store.put(certificate('edge.example', 33 * DAY - 1000)); // the same one again
      await store.remove('far.example');
      t.same(await names(), ['edge.example'], 'putting the same certificate again changes nothing');
      await store.remove('edge.example');
      t.same(await names(NOW + 100 * DAY), ['later.example', 'soon.example'], 'a removed certificate is gone from the index');
      t.equal(await store.get('edge.example'), null);
    });

    t.test('summary: stored certificates by time left, and the earliest expiry', async (t) => {
      const { store } = await backend.open(t);
      t.same(await store.summary(NOW), { earliest: null, lt7d: 0, lt30d: 0, ge30d: 0 });
      await store.put(certificate('a.example', 2 * DAY));
      await store.put(certificate('b.example', 10 * DAY));
      await store.put(certificate('c.example', 29 * DAY));
      await store.put(certificate('d.example', 45 * DAY));
      await store.put(certificate('e.example', 89 * DAY));
      t.same(await store.summary(NOW), { earliest: NOW + 2 * DAY, lt7d: 1, lt30d: 2, ge30d: 2 });
      await store.put(certificate('a.example', 90 * DAY));
      await store.remove('e.example');
      t.same(await store.summary(NOW), { earliest: NOW + 10 * DAY, lt7d: 0, lt30d: 2, ge30d: 2 }, 'after a renewal and a removal');
    });
  });
}

t.test('files: a line left by a crash (no longer matching meta.json) is dropped when it comes due, not renewed', async (t) => {
  const { store, certsDir } = await backends[0].open(t);
  await store.put(certificate('kept.example', 10 * DAY));
  await store.put(certificate('renewed.example', 80 * DAY));
  const renewals = path.join(certsDir!, 'renewals');
  // what a crash between writing the new certificate and dropping its old line leaves behind
  const old = certificate('renewed.example', 10 * DAY);
  const oldLine = `${Math.floor(renewalOpens(old.notBefore, old.notAfter))} ${Date.parse(old.notBefore)} ${Date.parse(old.notAfter)} renewed.example\n`;
  const day = new Date(renewalOpens(old.notBefore, old.notAfter)).toISOString().slice(0, 10);
  appendFileSync(path.join(renewals, day), oldLine);
  appendFileSync(path.join(renewals, day), `${NOW - DAY} ${NOW - 91 * DAY} ${NOW + 9 * DAY} gone.example\n`);
  t.same((await store.due(NOW)).map((v) => v.hostname), ['kept.example'], 'only the line meta.json agrees with');
  t.same((await store.due(NOW)).map((v) => v.hostname), ['kept.example']);
  const left = readdirSync(renewals).map((f) => readFileSync(path.join(renewals, f), 'utf8')).join('');
  t.notMatch(left, /gone\.example/, 'the line of a certificate that is gone was dropped');
  t.notOk(left.includes(oldLine), 'the stale line of the renewed one was dropped');
  t.match(left, /renewed\.example/, 'its current line stays');
});
