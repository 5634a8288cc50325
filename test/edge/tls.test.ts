// TLS policy: 1.2 and 1.3 only, AEAD suites with forward secrecy, session resumption with ticket
// keys shared by every instance on one Redis.
import t from 'tap';
import tls from 'node:tls';
import path from 'node:path';
import { writeFileSync } from 'node:fs';
import { selfSigned } from '../../src/certs/fallback.ts';
import { startPortico, tempDir } from '../helpers/portico.ts';
import { startRedis } from '../helpers/redis.ts';
import { admin } from '../helpers/client.ts';

/** Connects, waits for the session ticket, returns it with what was negotiated. */
function connect(port: number, ca: string, options: tls.ConnectionOptions = {}): Promise<{ reused: boolean; protocol: string | null; cipher: string; group: string | undefined; session: Buffer | undefined }> {
  return new Promise((resolve, reject) => {
    let session: Buffer | undefined;
    const socket = tls.connect({ host: '127.0.0.1', port, servername: 'api.localhost', ca, ALPNProtocols: ['http/1.1'], ...options });
    socket.on('session', (s) => (session = s));
    let group: string | undefined;
    socket.once('secureConnect', () => {
      group = (socket.getEphemeralKeyInfo() as { name?: string } | null)?.name;
      // TLS 1.3 tickets arrive after the handshake: give them a moment, then ask for nothing more
      socket.write('GET /v1/openapi.json HTTP/1.1\r\nHost: api.localhost\r\nConnection: close\r\n\r\n');
    });
    socket.on('data', () => undefined);
    socket.on('end', () => resolve({ reused: socket.isSessionReused(), protocol: socket.getProtocol(), cipher: socket.getCipher().name, group, session }));
    socket.on('error', reject);
  });
}

t.test('protocol versions and suites', async (t) => {
  const portico = await startPortico();
  t.teardown(() => portico.stop());
  const port = portico.ports.https;
  await t.rejects(connect(port, portico.ca, { maxVersion: 'TLSv1.1', minVersion: 'TLSv1' }), 'TLS 1.1 is refused');
  const tls12 = await connect(port, portico.ca, { maxVersion: 'TLSv1.2' });
  t.equal(tls12.protocol, 'TLSv1.2');
  t.match(tls12.cipher, /^ECDHE-ECDSA-(AES\d+-GCM|CHACHA20-POLY1305)/, `forward secrecy and AEAD (${tls12.cipher})`);
  await t.rejects(connect(port, portico.ca, { maxVersion: 'TLSv1.2', ciphers: 'AES128-SHA256' }), 'CBC without forward secrecy is refused');
  const tls13 = await connect(port, portico.ca);
  t.equal(tls13.protocol, 'TLSv1.3');
  t.equal(tls13.group, 'X25519MLKEM768', 'a client offering the hybrid post-quantum key exchange gets it');
  const aes256First = { ciphers: 'TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256' };
  t.equal((await connect(port, portico.ca, aes256First)).cipher, 'TLS_AES_128_GCM_SHA256', "the server's TLS 1.3 order decides: AES-128-GCM before the AES-256 that OpenSSL clients list first");
  t.equal((await connect(port, portico.ca, { ciphers: 'TLS_AES_256_GCM_SHA384' })).cipher, 'TLS_AES_256_GCM_SHA384', 'a client with only AES-256 gets it');
  t.equal((await connect(port, portico.ca, { ciphers: 'TLS_CHACHA20_POLY1305_SHA256' })).cipher, 'TLS_CHACHA20_POLY1305_SHA256', 'and one with only ChaCha20 gets that');
  t.equal((await connect(port, portico.ca, { ecdhCurve: 'X25519' })).group, 'X25519', 'a classical client gets X25519');
  t.equal((await connect(port, portico.ca, { ecdhCurve: 'P-256' })).group, 'prime256v1', 'and one with only P-256 gets that');
  t.equal((await connect(port, portico.ca, { maxVersion: 'TLSv1.2' })).group, 'X25519', 'TLS 1.2 uses X25519 (ML-KEM is TLS 1.3 only)');
  await t.rejects(connect(port, portico.ca, { ecdhCurve: 'P-521' }), 'a group outside the list is refused');
});

t.test('https.keyExchange replaces the key exchange groups, for the fallback and for a certificate picked by SNI', async (t) => {
  const dir = tempDir('key-exchange');
  const wildcard = await selfSigned(['*.platform.test'], 30);
  writeFileSync(path.join(dir, 'wildcard.crt'), wildcard.cert);
  writeFileSync(path.join(dir, 'wildcard.key'), wildcard.key);
  const portico = await startPortico({
    PORTICO_HTTPS_KEY_EXCHANGE: 'P-256,X25519',
    PORTICO_PLATFORM_DOMAIN: 'platform.test',
    PORTICO_PLATFORM_CERT_FILE: path.join(dir, 'wildcard.crt'),
    PORTICO_PLATFORM_KEY_FILE: path.join(dir, 'wildcard.key'),
  });
  t.teardown(() => portico.stop());
  const account = (await admin(portico.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  t.equal((await admin(portico.ports.admin, 'POST', '/admin/projects', { accountId: account.id, name: 'shop', upstream: 'http://127.0.0.1:9' })).status, 201);
  const port = portico.ports.https;
  for (const [servername, ca] of [['api.localhost', portico.ca], ['shop.platform.test', wildcard.cert]] as const) {
    const at = (options: tls.ConnectionOptions) => connect(port, ca, { servername, ...options });
    // Node's client offers X25519MLKEM768 first: without it on the list, the next group both know is used
    t.equal((await at({})).group, 'X25519', `${servername}: a client offering the hybrid gets X25519 instead`);
    t.equal((await at({ ecdhCurve: 'P-256' })).group, 'prime256v1', `${servername}: P-256 stays`);
    t.equal((await at({ ciphers: 'TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256' })).cipher, 'TLS_AES_128_GCM_SHA256', `${servername}: the server's suite order holds`);
    await t.rejects(at({ ecdhCurve: 'X25519MLKEM768' }), `${servername}: a client that offers only the hybrid is refused`);
    await t.rejects(at({ ecdhCurve: 'P-384' }), `${servername}: so is one offering only a group left out`);
  }
});

t.test('session resumption on one instance and across instances sharing Redis', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const a = await startPortico({ PORTICO_REDIS_URL: redis.url });
  t.teardown(() => a.stop());
  const b = await startPortico({ PORTICO_REDIS_URL: redis.url, PORTICO_CERTS_DIR: a.certsDir });
  t.teardown(() => b.stop());
  for (const version of ['TLSv1.3', 'TLSv1.2'] as const) {
    const first = await connect(a.ports.https, a.ca, { maxVersion: version });
    t.notOk(first.reused, `${version}: first connection is a full handshake`);
    t.ok(first.session, `${version}: a session ticket was issued`);
    const again = await connect(a.ports.https, a.ca, { maxVersion: version, session: first.session });
    t.ok(again.reused, `${version}: resumed on the same instance`);
    const elsewhere = await connect(b.ports.https, a.ca, { maxVersion: version, session: first.session });
    t.ok(elsewhere.reused, `${version}: resumed on the other instance (shared ticket key)`);
  }
  const embedded = await startPortico();
  t.teardown(() => embedded.stop());
  const first = await connect(a.ports.https, a.ca);
  const foreign = await connect(embedded.ports.https, embedded.ca, { session: first.session });
  t.notOk(foreign.reused, 'an instance with another ticket key does a full handshake');
});
