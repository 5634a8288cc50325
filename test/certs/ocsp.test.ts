// OCSP stapling against a real responder (an HTTP server here that reads each request and answers a
// signed BasicOCSPResponse, RFC 6960) and real TLS handshakes whose clients ask for a staple
// (RFC 6066 §8). The responder's side is written with asn1js, independently of src/certs/ocsp.ts.
import t, { type Test } from 'tap';
import tls from 'node:tls';
import http from 'node:http';
import http2 from 'node:http2';
import { createHash, KeyObject, sign, verify, webcrypto } from 'node:crypto';
import * as x509 from '@peculiar/x509';
import * as asn1js from 'asn1js';
import { AsnConvert } from '@peculiar/asn1-schema';
import { Certificate } from '@peculiar/asn1-x509';
import { createOcspStapler, ocspRequestDer, responderUrl, type OcspStapler } from '../../src/certs/ocsp.ts';

// ---- a test CA, and leaves for shop.example.com signed by it

x509.cryptoProvider.set(webcrypto as never);
const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
const NOT_BEFORE = new Date(Date.now() - 60_000);
const NOT_AFTER = new Date(Date.now() + 30 * 86_400_000);
const generateKeys = async () => (await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;

const caKeys = await generateKeys();
const ca = await x509.X509CertificateGenerator.createSelfSigned({
  serialNumber: '01',
  name: 'CN=Portico Test OCSP CA',
  notBefore: NOT_BEFORE,
  notAfter: NOT_AFTER,
  keys: caKeys as never,
  signingAlgorithm: ALGORITHM,
  extensions: [new x509.BasicConstraintsExtension(true, undefined, true), new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true)],
});
const caPem = ca.toString('pem') + '\n';
const caDer = Buffer.from(ca.rawData);
const caSigningKey = KeyObject.from(caKeys.privateKey as never);
const caPublicKey = KeyObject.from(caKeys.publicKey as never);

interface Leaf { certPem: string; keyPem: string; der: Buffer; serial: Buffer }

/** `serial` in hex; one with the high bit set is encoded with a leading 00 byte */
async function makeLeaf(serial: string, ocspUrl: string | null): Promise<Leaf> {
  const keys = await generateKeys();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial,
    subject: 'CN=shop.example.com',
    issuer: ca.subject,
    notBefore: NOT_BEFORE,
    notAfter: NOT_AFTER,
    signingKey: caKeys.privateKey as never,
    publicKey: keys.publicKey as never,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.SubjectAlternativeNameExtension([{ type: 'dns', value: 'shop.example.com' }]),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      ...(ocspUrl ? [new x509.AuthorityInfoAccessExtension({ ocsp: [ocspUrl] })] : []),
    ],
  });
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey));
  const der = Buffer.from(cert.rawData);
  return {
    certPem: cert.toString('pem') + '\n',
    keyPem: `-----BEGIN PRIVATE KEY-----\n${pkcs8.toString('base64')}\n-----END PRIVATE KEY-----\n`,
    der,
    serial: Buffer.from(AsnConvert.parse(der, Certificate).tbsCertificate.serialNumber),
  };
}

// What the CertID must carry, computed from the CA certificate with @peculiar/asn1-x509.
const caTbs = AsnConvert.parse(caDer, Certificate).tbsCertificate;
const sha1 = (bytes: ArrayBuffer | Uint8Array) => createHash('sha1').update(new Uint8Array(bytes)).digest();
const expectedNameHash = sha1(AsnConvert.serialize(caTbs.subject));
const expectedKeyHash = sha1(caTbs.subjectPublicKeyInfo.subjectPublicKey);

// ---- the responder

interface ParsedRequest { hashAlgorithm: string; nameHash: Buffer; keyHash: Buffer; serial: Buffer; certId: asn1js.Sequence }

/** RFC 6960 §4.1.1, read with asn1js: OCSPRequest → TBSRequest → requestList → Request → CertID */
function parseRequest(der: Buffer): ParsedRequest {
  const parsed = asn1js.fromBER(new Uint8Array(der));
  if (parsed.offset === -1 || parsed.offset !== der.length) throw new Error('not one DER value');
  const seq = (block: unknown) => {
    if (!(block instanceof asn1js.Sequence)) throw new Error('expected a SEQUENCE');
    return block.valueBlock.value;
  };
  const tbs = seq(seq(parsed.result)[0]);
  const requestList = seq(tbs.find((b) => b instanceof asn1js.Sequence));
  if (requestList.length !== 1) throw new Error('expected one request');
  const certId = seq(seq(requestList[0])[0]);
  const [algorithm, nameHash, keyHash, serial] = certId as [asn1js.Sequence, asn1js.OctetString, asn1js.OctetString, asn1js.Integer];
  return {
    hashAlgorithm: (algorithm.valueBlock.value[0] as asn1js.ObjectIdentifier).valueBlock.toString(),
    nameHash: Buffer.from(nameHash.valueBlock.valueHexView),
    keyHash: Buffer.from(keyHash.valueBlock.valueHexView),
    serial: Buffer.from(serial.valueBlock.valueHexView),
    certId: seq(requestList[0])[0] as asn1js.Sequence,
  };
}

const context = (tagNumber: number, value: asn1js.AsnType[]) => new asn1js.Constructed({ idBlock: { tagClass: 3, tagNumber }, value });

/** OCSPResponse { responseStatus, responseBytes [0] { id-pkix-ocsp-basic, BasicOCSPResponse } } */
function ocspResponse(status: number, basic?: ArrayBuffer): Buffer {
  const responseBytes = basic
    ? [context(0, [new asn1js.Sequence({ value: [new asn1js.ObjectIdentifier({ value: '1.3.6.1.5.5.7.48.1.1' }), new asn1js.OctetString({ valueHex: basic })] })])]
    : [];
  return Buffer.from(new asn1js.Sequence({ value: [new asn1js.Enumerated({ value: status }), ...responseBytes] }).toBER());
}

/** A BasicOCSPResponse saying "good" for `certId`, signed by the CA (RFC 6960 §4.2.1). */
function basicResponse(certId: asn1js.Sequence, thisUpdate: Date, nextUpdate: Date | null): ArrayBuffer {
  const single = new asn1js.Sequence({
    value: [
      certId,
      new asn1js.Primitive({ idBlock: { tagClass: 3, tagNumber: 0 } }), // good [0] IMPLICIT NULL
      new asn1js.GeneralizedTime({ valueDate: thisUpdate }),
      ...(nextUpdate ? [context(0, [new asn1js.GeneralizedTime({ valueDate: nextUpdate })])] : []),
    ],
  });
  const tbs = new asn1js.Sequence({
    value: [
      context(2, [new asn1js.OctetString({ valueHex: new Uint8Array(expectedKeyHash) })]), // responderID byKey
      new asn1js.GeneralizedTime({ valueDate: thisUpdate }),
      new asn1js.Sequence({ value: [single] }),
    ],
  });
  const tbsDer = Buffer.from(tbs.toBER());
  const signature = sign('sha256', tbsDer, caSigningKey);
  return new asn1js.Sequence({
    value: [
      tbs,
      new asn1js.Sequence({ value: [new asn1js.ObjectIdentifier({ value: '1.2.840.10045.4.3.2' })] }), // ecdsa-with-SHA256
      new asn1js.BitString({ valueHex: new Uint8Array(signature) }),
    ],
  }).toBER();
}

type Answer = 'good' | 'good-no-next-update' | 'other-certificate' | 'http-500' | 'try-later' | 'hang';

interface Responder {
  url: string;
  answer: Answer;
  /** the next answers wait for this (concurrent handshakes see the fetch still in flight) */
  gate: Promise<void> | null;
  requests: Array<{ method?: string; contentType?: string; parsed: ParsedRequest }>;
  /** the bytes of each 200 answer */
  sent: Buffer[];
}

async function startResponder(t: Test): Promise<Responder> {
  const responder: Responder = { url: '', answer: 'good', gate: null, requests: [], sent: [] };
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const parsed = parseRequest(Buffer.concat(chunks));
    responder.requests.push({ method: req.method, contentType: req.headers['content-type'], parsed });
    if (responder.gate) await responder.gate;
    const now = new Date();
    const answer = responder.answer;
    if (answer === 'hang') return;
    if (answer === 'http-500') return res.writeHead(500).end();
    let body: Buffer;
    if (answer === 'try-later') body = ocspResponse(3);
    else if (answer === 'good-no-next-update') body = ocspResponse(0, basicResponse(parsed.certId, now, null));
    else if (answer === 'other-certificate') {
      const other = parseRequest(ocspRequestDer((await makeLeaf('7777', null)).der, caDer)).certId;
      body = ocspResponse(0, basicResponse(other, now, new Date(now.getTime() + 4 * 3_600_000)));
    } else body = ocspResponse(0, basicResponse(parsed.certId, now, new Date(now.getTime() + 4 * 3_600_000)));
    responder.sent.push(body);
    res.writeHead(200, { 'content-type': 'application/ocsp-response' }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  responder.url = `http://127.0.0.1:${(server.address() as { port: number }).port}/ocsp`;
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }));
  return responder;
}

// ---- the edge side: a TLS server wired like listeners.ts would, and a client that asks for a staple

async function startTls(t: Test, stapler: OcspStapler, leaf: Leaf, options: { chain?: boolean } = {}): Promise<number> {
  const server = tls.createServer({ cert: leaf.certPem + (options.chain === false ? '' : caPem), key: leaf.keyPem });
  server.on('OCSPRequest', stapler.onRequest);
  server.on('secureConnection', (socket) => socket.end());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return (server.address() as { port: number }).port;
}

interface Handshake { staple: Buffer | null; ms: number; authorized: boolean; events: number }

function handshake(port: number): Promise<Handshake> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let staple: Buffer | null = null;
    let events = 0;
    const socket = tls.connect({ host: '127.0.0.1', port, servername: 'shop.example.com', ca: caPem, requestOCSP: true, ALPNProtocols: ['http/1.1'] }, () => {
      resolve({ staple, ms: performance.now() - started, authorized: socket.authorized, events });
      socket.end();
    });
    // emitted once per handshake, with null when the server stapled nothing
    socket.on('OCSPResponse', (response: Buffer | null) => {
      events += 1;
      staple = response;
    });
    socket.on('error', reject);
  });
}

async function until(condition: () => boolean, what: string, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** The staple of the first handshake that gets one (a fetch is finishing in the background). */
async function stapled(port: number, attempts = 100): Promise<Buffer | null> {
  for (let i = 0; i < attempts; i++) {
    const { staple } = await handshake(port);
    if (staple) return staple;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return null;
}

function recordErrors() {
  const errors: Array<{ code?: string; message: string }> = [];
  return { errors, onError: (err: unknown) => errors.push(err as { code?: string; message: string }) };
}

// ---- tests

t.test('the request is the RFC 6960 §4.1.1 shape with a SHA-1 CertID for the leaf', async (t) => {
  const leaf = await makeLeaf('8f0102030405', 'http://127.0.0.1:9/ocsp');
  const parsed = parseRequest(ocspRequestDer(leaf.der, caDer));
  t.equal(parsed.hashAlgorithm, '1.3.14.3.2.26', 'id-sha1');
  t.same(parsed.nameHash, expectedNameHash, 'SHA-1 of the issuer\'s subject Name');
  t.same(parsed.keyHash, expectedKeyHash, 'SHA-1 of the issuer\'s subjectPublicKey bits');
  t.equal(parsed.serial.toString('hex'), '008f0102030405', 'the leaf serial, leading zero byte kept');
  t.same(parsed.serial, leaf.serial);
  t.equal(responderUrl(leaf.der), 'http://127.0.0.1:9/ocsp');
  t.equal(responderUrl((await makeLeaf('02', null)).der), null, 'no AIA, no responder');
  t.equal(responderUrl(caDer), null);
});

t.test('the first handshake goes without a staple and starts one fetch; the next carries the responder\'s bytes', async (t) => {
  const responder = await startResponder(t);
  const leaf = await makeLeaf('1001', responder.url);
  const { errors, onError } = recordErrors();
  const stapler = createOcspStapler({ onError });
  const port = await startTls(t, stapler, leaf);

  const first = await handshake(port);
  t.ok(first.authorized, 'the chain verifies against the test CA');
  t.equal(first.events, 1, 'the client asked, and heard back');
  t.equal(first.staple, null, 'no staple on a miss');
  await until(() => stapler.size() === 1, 'the fetch');
  t.equal(responder.requests.length, 1, 'one request');
  const [request] = responder.requests;
  t.equal(request.method, 'POST');
  t.equal(request.contentType, 'application/ocsp-request');
  t.same(request.parsed.serial, leaf.serial, 'for the leaf\'s serial');
  t.same([request.parsed.nameHash, request.parsed.keyHash], [expectedNameHash, expectedKeyHash], 'and its issuer');

  const second = await handshake(port);
  t.same(second.staple, responder.sent[0], 'stapled, byte for byte');
  const third = await handshake(port);
  t.same(third.staple, responder.sent[0], 'served from the cache');
  t.equal(responder.requests.length, 1, 'without another fetch');
  t.same(errors, []);

  // the staple is a real BasicOCSPResponse signed by the CA
  const outer = asn1js.fromBER(new Uint8Array(second.staple!)).result as asn1js.Sequence;
  const bytes = ((outer.valueBlock.value[1] as asn1js.Constructed).valueBlock.value[0] as asn1js.Sequence).valueBlock.value[1] as asn1js.OctetString;
  const basic = (asn1js.fromBER(bytes.valueBlock.valueHexView).result as asn1js.Sequence).valueBlock.value;
  const signature = Buffer.from((basic[2] as asn1js.BitString).valueBlock.valueHexView);
  t.ok(verify('sha256', Buffer.from(basic[0].toBER()), caPublicKey, signature), 'signature verifies with the CA key');
});

t.test('concurrent first handshakes start one fetch', async (t) => {
  const responder = await startResponder(t);
  let release!: () => void;
  responder.gate = new Promise((resolve) => { release = resolve; });
  const stapler = createOcspStapler();
  const port = await startTls(t, stapler, await makeLeaf('1002', responder.url));

  const all = await Promise.all(Array.from({ length: 20 }, () => handshake(port)));
  t.same(all.map((h) => h.staple), Array(20).fill(null), 'none waits for the responder');
  await until(() => responder.requests.length === 1, 'the request');
  release();
  await until(() => stapler.size() === 1, 'the fetch');
  t.same((await handshake(port)).staple, responder.sent[0]);
  t.equal(responder.requests.length, 1, 'one fetch for twenty misses');
});

t.test('a certificate that names no responder: no fetch, no staple', async (t) => {
  const responder = await startResponder(t);
  let fetches = 0;
  const stapler = createOcspStapler({ fetch: (...args) => { fetches += 1; return fetch(...args); } });
  const port = await startTls(t, stapler, await makeLeaf('1003', null));
  for (let i = 0; i < 3; i++) t.equal((await handshake(port)).staple, null);
  t.equal(fetches, 0);
  t.equal(responder.requests.length, 0);
});

for (const answer of ['http-500', 'try-later', 'other-certificate'] as const) {
  t.test(`a responder answering ${answer}: no staple, and no retry for 5 minutes`, async (t) => {
    const responder = await startResponder(t);
    responder.answer = answer;
    const clock = { ms: Date.now() };
    const { errors, onError } = recordErrors();
    const stapler = createOcspStapler({ now: () => clock.ms, onError });
    const port = await startTls(t, stapler, await makeLeaf('1004', responder.url));

    t.equal((await handshake(port)).staple, null);
    await until(() => errors.length === 1, 'the failure');
    const code = { 'http-500': 'OCSP_HTTP_STATUS', 'try-later': 'OCSP_UNSUCCESSFUL', 'other-certificate': 'OCSP_WRONG_CERTIFICATE' }[answer];
    t.equal(errors[0].code, code, errors[0].message);
    t.equal((await handshake(port)).staple, null, 'nothing stapled');

    responder.answer = 'good';
    clock.ms += 4 * 60_000;
    t.equal((await handshake(port)).staple, null);
    await new Promise((resolve) => setTimeout(resolve, 50));
    t.equal(responder.requests.length, 1, 'no retry within 5 minutes');

    clock.ms += 61_000;
    t.equal((await handshake(port)).staple, null, 'the retry runs in the background');
    await until(() => responder.requests.length === 2, 'the retry');
    t.same(await stapled(port), responder.sent.at(-1), 'stapled once the responder recovers');
    t.equal(errors.length, 1);
  });
}

t.test('a responder that hangs does not delay the handshake, and the fetch times out', async (t) => {
  // Told by order, not by the clock: a handshake that waited for the fetch would end only after its
  // timeout (the error), so each handshake must end while no error has been reported yet. A loaded
  // machine slows a handshake; it does not reorder these.
  const TIMEOUT_MS = 1500;
  const responder = await startResponder(t);
  responder.answer = 'hang';
  const { errors, onError } = recordErrors();
  const stapler = createOcspStapler({ timeoutMs: TIMEOUT_MS, onError });
  const port = await startTls(t, stapler, await makeLeaf('1005', responder.url));

  const started = Date.now();
  const first = await handshake(port);
  t.equal(first.staple, null);
  t.equal(errors.length, 0, `the handshake ended before the fetch timed out (${Math.round(first.ms)} ms)`);
  await until(() => responder.requests.length === 1, 'the request');
  const during = await handshake(port);
  t.equal(during.staple, null);
  t.equal(errors.length, 0, `nor does one made while the fetch is outstanding wait for it (${Math.round(during.ms)} ms)`);
  await until(() => errors.length === 1, 'the timeout');
  const elapsed = Date.now() - started;
  t.equal(errors[0].code, 'OCSP_FETCH', errors[0].message);
  t.ok(elapsed >= TIMEOUT_MS - 20, `gave up after ${elapsed} ms, not before its timeout`);
  t.equal(responder.requests.length, 1, 'one fetch');
});

t.test('freshness follows nextUpdate: refresh halfway, never staple past it', async (t) => {
  const responder = await startResponder(t);
  const clock = { ms: Date.now() };
  const { errors, onError } = recordErrors();
  const stapler = createOcspStapler({ now: () => clock.ms, onError });
  const port = await startTls(t, stapler, await makeLeaf('1006', responder.url));
  await handshake(port);
  await until(() => stapler.size() === 1, 'the fetch');
  const first = responder.sent[0]; // thisUpdate now, nextUpdate in 4 h

  clock.ms += 119 * 60_000;
  t.same((await handshake(port)).staple, first);
  t.equal(responder.requests.length, 1, 'no refresh before halfway');

  responder.answer = 'http-500';
  clock.ms += 2 * 60_000;
  t.same((await handshake(port)).staple, first, 'halfway: still stapled while refreshing');
  await until(() => errors.length === 1, 'the failed refresh');
  t.same((await handshake(port)).staple, first, 'a failed refresh keeps the staple until nextUpdate');

  clock.ms += 2 * 3_600_000;
  t.equal((await handshake(port)).staple, null, 'not past nextUpdate');
});

t.test('without nextUpdate a staple is kept for one hour', async (t) => {
  const responder = await startResponder(t);
  responder.answer = 'good-no-next-update';
  const clock = { ms: Date.now() };
  const stapler = createOcspStapler({ now: () => clock.ms });
  const port = await startTls(t, stapler, await makeLeaf('1007', responder.url));
  await handshake(port);
  await until(() => stapler.size() === 1, 'the fetch');
  clock.ms += 59 * 60_000;
  t.same((await handshake(port)).staple, responder.sent[0]);
  t.equal(responder.requests.length, 1);
  clock.ms += 2 * 60_000;
  t.equal((await handshake(port)).staple, null, 'expired after an hour');
  await until(() => responder.requests.length === 2, 'the refetch');
});

t.test('the cache holds at most maxEntries certificates', async (t) => {
  const responder = await startResponder(t);
  const stapler = createOcspStapler({ maxEntries: 2 });
  for (const serial of ['2001', '2002', '2003']) {
    const port = await startTls(t, stapler, await makeLeaf(serial, responder.url));
    await handshake(port);
    await until(() => responder.sent.length === Number(serial) - 2000, 'the fetch');
  }
  await until(() => responder.requests.length === 3, 'three fetches');
  t.equal(stapler.size(), 2);
});

t.test('wired like the edge: http2.createSecureServer with allowHTTP1 and an SNICallback context', async (t) => {
  const responder = await startResponder(t);
  const leaf = await makeLeaf('3001', responder.url);
  const fallback = await makeLeaf('3002', null);
  const stapler = createOcspStapler();
  const sni = tls.createSecureContext({ cert: leaf.certPem + caPem, key: leaf.keyPem });
  const server = http2.createSecureServer({ allowHTTP1: true, cert: fallback.certPem, key: fallback.keyPem, SNICallback: (_name, done) => done(null, sni) });
  server.on('OCSPRequest', stapler.onRequest);
  server.on('request', (_req, res) => res.end());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const port = (server.address() as { port: number }).port;

  t.equal((await handshake(port)).staple, null);
  await until(() => stapler.size() === 1, 'the fetch');
  t.same(responder.requests[0].parsed.serial, leaf.serial, 'the SNI context\'s certificate, not the default one');
  t.same((await handshake(port)).staple, responder.sent[0]);
});

t.test('Node finds the issuer only in the context\'s chain (or its `ca`): without it, no staple and no fetch', async (t) => {
  const responder = await startResponder(t);
  const leaf = await makeLeaf('4001', responder.url);
  const issuers: Array<Buffer | null> = [];
  const stapler = createOcspStapler();
  const recording: OcspStapler = { onRequest: (cert, issuer, done) => { issuers.push(issuer); stapler.onRequest(cert, issuer, done); }, size: stapler.size };
  const withoutChain = tls.createSecureContext({ cert: leaf.certPem, key: leaf.keyPem });
  const server = tls.createServer({ cert: leaf.certPem + caPem, key: leaf.keyPem, SNICallback: (_name, done) => done(null, withoutChain) });
  server.on('OCSPRequest', recording.onRequest);
  server.on('secureConnection', (socket) => socket.end());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const first = await handshake((server.address() as { port: number }).port);
  t.ok(first.authorized, 'the client still verifies: the leaf is signed by its trust anchor');
  t.same(issuers, [null], 'the SNI context is asked, and it has no issuer (the default context\'s chain does not count)');
  t.equal(first.staple, null);
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.equal(responder.requests.length, 0);

  const withCa = tls.createServer({ cert: leaf.certPem, key: leaf.keyPem, ca: caPem });
  withCa.on('OCSPRequest', recording.onRequest);
  withCa.on('secureConnection', (socket) => socket.end());
  await new Promise<void>((resolve) => withCa.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => withCa.close(() => resolve())));
  await handshake((withCa.address() as { port: number }).port);
  t.same(issuers[1], caDer, 'with `ca` set, Node finds the issuer in the context\'s store');
});
