// The fallback certificate: self-signed for `localhost` and `*.localhost`, made on first start and
// kept in the certs dir. Served for unknown SNI and for names without a certificate of their own.
// The API hostnames are listed too: TLS clients refuse `*.localhost` for `api.localhost` (a wildcard
// directly under a single-label name), so `curl --cacert certs/fallback.crt` works for them.
import { existsSync, mkdirSync, readFileSync, writeFileSync, renameSync } from 'node:fs';
import { webcrypto, randomBytes, createPrivateKey, X509Certificate, type KeyObject } from 'node:crypto';
import { runningUser } from '../running-user.ts';
import path from 'node:path';
import { isIP } from 'node:net';

export interface KeyPair {
  cert: string;
  key: string;
}

export interface Fallback extends KeyPair {
  certFile: string;
  keyFile: string;
  created: boolean;
}

export async function ensureFallbackCertificate(certsDir: string, extraNames: readonly string[] = []): Promise<Fallback> {
  const certFile = path.join(certsDir, 'fallback.crt');
  const keyFile = path.join(certsDir, 'fallback.key');
  if (existsSync(certFile) && existsSync(keyFile)) {
    const cert = readPem(certFile, certsDir);
    const key = readPem(keyFile, certsDir);
    checkPair(cert, key, certFile, keyFile);
    return { cert, key, certFile, keyFile, created: false };
  }
  mkdirSync(certsDir, { recursive: true });
  const pair = await selfSigned([...new Set(['localhost', '*.localhost', ...extraNames])], 365 * 10);
  writeAtomic(keyFile, pair.key, 0o600);
  writeAtomic(certFile, pair.cert, 0o644);
  return { ...pair, certFile, keyFile, created: true };
}

/** the fix of a damaged pair: a new pair is made whenever one of the files is missing; both are named so no half is kept */
function remake(certsDir: string): string {
  return `delete both fallback.crt and fallback.key in ${certsDir} (PORTICO_CERTS_DIR) and Portico makes a new pair at the next start`;
}

function readPem(file: string, certsDir: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EACCES' && code !== 'EPERM') throw err;
    // the usual cause: a first start as root, then a start as a service user
    const user = runningUser().name;
    throw new Error(`cannot read ${file}: the files of the certs dir ${certsDir} (PORTICO_CERTS_DIR) must belong to the user running Portico (${user}): chown -R ${user} ${certsDir}`, { cause: err });
  }
}

/**
 * Checked here, at the file, not left to the TLS listener: its OpenSSL error ("PEM routines::no start
 * line") names neither the file nor the fix. Covers junk in either file, the certificate copied over
 * the key, and a key of another certificate.
 */
function checkPair(cert: string, key: string, certFile: string, keyFile: string): void {
  const certsDir = path.dirname(certFile);
  let certificate: X509Certificate;
  let privateKey: KeyObject;
  try {
    certificate = new X509Certificate(cert);
  } catch (err) {
    throw new Error(`the fallback certificate ${certFile} is damaged: not a PEM certificate (${(err as Error).message}); ${remake(certsDir)}`);
  }
  try {
    privateKey = createPrivateKey(key);
  } catch (err) {
    throw new Error(`the fallback key ${keyFile} is damaged: not a PEM private key (${(err as Error).message}); ${remake(certsDir)}`);
  }
  if (!certificate.checkPrivateKey(privateKey)) throw new Error(`the fallback key ${keyFile} is not the key of ${certFile}; ${remake(certsDir)}`);
}

/** ECDSA P-256 self-signed certificate for `names` (the first is the subject). */
export async function selfSigned(names: string[], days: number): Promise<KeyPair> {
  // loaded only to make a certificate (@peculiar/x509 and its ASN.1 packages take ~0.25 s to load):
  // a start with the files already in place never needs it
  const x509 = await import('@peculiar/x509');
  x509.cryptoProvider.set(webcrypto as never);
  const algorithm = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
  const keys = (await webcrypto.subtle.generateKey(algorithm, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const notBefore = new Date(Date.now() - 60_000);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomBytes(8).toString('hex').replace(/^[89a-f]/, '1'),
    name: `CN=${names[0]}, O=Portico fallback`,
    notBefore,
    notAfter: new Date(notBefore.getTime() + days * 86_400_000),
    keys: keys as never,
    signingAlgorithm: algorithm,
    extensions: [
      new x509.SubjectAlternativeNameExtension(names.map((value) => (isIP(value) ? { type: 'ip' as const, value } : { type: 'dns' as const, value }))),
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
    ],
  });
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey));
  const key = `-----BEGIN PRIVATE KEY-----\n${pkcs8.toString('base64').replace(/(.{64})/g, '$1\n').replace(/\n$/, '')}\n-----END PRIVATE KEY-----\n`;
  return { cert: cert.toString('pem') + '\n', key };
}

export function writeAtomic(file: string, content: string, mode: number): void {
  const temp = `${file}.${process.pid}.tmp`;
  writeFileSync(temp, content, { mode });
  renameSync(temp, file);
}
