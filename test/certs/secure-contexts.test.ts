// Contexts made ahead and loaded at handshake time (src/certs/secure-contexts.ts) serve exactly what a
// context made by tls.createSecureContext serves: the same leaf and chain over a real TLS handshake,
// the same refusal of a key that does not match; and the spares come back after use.
import t from 'tap';
import tls from 'node:tls';
import { execFile } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { selfSigned } from '../../src/certs/fallback.ts';
import { createContextMaker } from '../../src/certs/secure-contexts.ts';

// spares are made one at a time, 10 ms apart
const turn = () => new Promise((resolve) => setTimeout(resolve, 15));
const a = await selfSigned(['a.example'], 30);
const b = await selfSigned(['b.example'], 30);
// a leaf followed by one more certificate: stands for a chain (OpenSSL sends extra certificates as given)
const chained = a.cert + b.cert;

/** A TLS server whose SNI callback hands out `context`; returns what openssl s_client received. */
async function served(context: tls.SecureContext, servername: string): Promise<{ subjects: string[]; fingerprint: string }> {
  const fallback = await selfSigned(['fallback.example'], 30);
  const server = tls.createServer({ key: fallback.key, cert: fallback.cert, SNICallback: (_name, cb) => cb(null, context) }, (socket) => socket.end());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const port = (server.address() as AddressInfo).port;
    // openssl runs asynchronously: the server in this process must be free to answer it
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, '-servername', servername, '-showcerts'], { timeout: 10_000 }, (err, out) => (out ? resolve(out) : reject(err))).stdin!.end();
    });
    const pems = stdout.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
    return { subjects: pems.map((pem) => new X509Certificate(pem).subject.split('\n')[0]), fingerprint: pems[0] ? new X509Certificate(pems[0]).fingerprint256 : '' };
  } finally {
    server.close();
  }
}

t.test('a loaded spare serves the same leaf and chain as tls.createSecureContext', async (t) => {
  const maker = createContextMaker(2);
  await turn();
  await turn();
  t.equal(maker.ready, 2, 'two spares made ahead, one at a time');
  const fast = await served(maker.make(chained, a.key), 'a.example');
  const plain = await served(tls.createSecureContext({ cert: chained, key: a.key }), 'a.example');
  t.same(fast.subjects, ['CN=a.example', 'CN=b.example'], 'leaf then the rest of the chain');
  t.same(fast, plain, 'the same certificates as the documented way');
  t.equal(fast.fingerprint, new X509Certificate(a.cert).fingerprint256);
});

t.test('a key that does not match its certificate is refused, as createSecureContext refuses it', async (t) => {
  const maker = createContextMaker(1);
  await turn();
  t.equal(maker.ready, 1);
  t.throws(() => tls.createSecureContext({ cert: a.cert, key: b.key }), 'the documented way refuses it');
  t.throws(() => maker.make(a.cert, b.key), 'a spare refuses it too');
  t.throws(() => maker.make('not a certificate', a.key), 'a malformed certificate too');
  await turn();
  await turn();
  const context = maker.make(b.cert, b.key);
  t.equal((await served(context, 'b.example')).fingerprint, new X509Certificate(b.cert).fingerprint256, 'a half-made spare was dropped, not reused');
});

t.test('spares come back after use; with none ready (or spare 0) contexts are made the documented way', async (t) => {
  const maker = createContextMaker(2);
  t.equal(maker.ready, 1, 'one made at once (it also tells whether spares can be loaded), the other later');
  maker.make(b.cert, b.key);
  const early = maker.make(a.cert, a.key);
  t.equal((await served(early, 'a.example')).fingerprint, new X509Certificate(a.cert).fingerprint256, 'none ready: made on the spot');
  for (let i = 0; i < 4; i++) await turn();
  t.equal(maker.ready, 2, 'refilled');
  maker.make(a.cert, a.key);
  maker.make(b.cert, b.key);
  t.equal(maker.ready, 0);
  for (let i = 0; i < 4; i++) await turn();
  t.equal(maker.ready, 2, 'refilled again');
  const none = createContextMaker(0);
  await turn();
  t.equal(none.ready, 0);
  t.equal((await served(none.make(b.cert, b.key), 'b.example')).fingerprint, new X509Certificate(b.cert).fingerprint256);
});
