// What the configuration names on disk, checked with the rest of it: the data and certs dirs Portico
// creates and writes, and the operator's platform certificate. A problem here joins the one report
// (exit 2) instead of surfacing later as a bare EEXIST, ENOTDIR, EACCES or OpenSSL line.
import { accessSync, constants, readFileSync, statSync } from 'node:fs';
import path from 'node:path';

/**
 * `dir` must be a writable directory, or creatable: its nearest existing ancestor a writable
 * directory. `setting` names it in the problem (`dataDir (PORTICO_DATA_DIR)`).
 */
export function directoryProblems(setting: string, dir: string): string[] {
  let existing = dir;
  for (;;) {
    try {
      const stat = statSync(existing);
      if (!stat.isDirectory()) {
        return [existing === dir ? `${setting}: ${dir} is not a directory` : `${setting}: ${dir} cannot be created: ${existing} is not a directory`];
      }
      break;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // ENOTDIR: a file on the way, found one level up
      if ((code !== 'ENOENT' && code !== 'ENOTDIR') || path.dirname(existing) === existing) {
        return [`${setting}: ${dir} cannot be used: ${code ?? (err as Error).message}`];
      }
      existing = path.dirname(existing);
    }
  }
  try {
    // X: files inside are opened by path
    accessSync(existing, constants.W_OK | constants.X_OK);
  } catch {
    return [existing === dir ? `${setting}: ${dir} is not writable by this process` : `${setting}: ${dir} cannot be created: ${existing} is not writable by this process`];
  }
  return [];
}

const CERT = 'platform.certFile (PORTICO_PLATFORM_CERT_FILE)';
const KEY = 'platform.keyFile (PORTICO_PLATFORM_KEY_FILE)';

/** The pair must load: a PEM certificate (chain), an unencrypted PEM key, and the key must be the certificate's. */
export function platformPairProblems(certFile: string, keyFile: string): string[] {
  // node:crypto and node:tls only when a pair is configured: the CLI's admin commands load config.ts too
  const { X509Certificate, createPrivateKey } = process.getBuiltinModule('node:crypto');
  const { createSecureContext } = process.getBuiltinModule('node:tls');
  const problems: string[] = [];
  const read = (setting: string, file: string) => {
    try {
      return readFileSync(file, 'utf8');
    } catch (err) {
      problems.push(`${setting}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
      return null;
    }
  };
  const certText = read(CERT, certFile);
  const keyText = read(KEY, keyFile);
  let cert: InstanceType<typeof X509Certificate> | null = null;
  let key: ReturnType<typeof createPrivateKey> | null = null;
  if (certText !== null) {
    try {
      cert = new X509Certificate(certText);
    } catch {
      problems.push(`${CERT}: ${certFile} ${certText.trim() === '' ? 'is empty' : 'holds no PEM certificate (-----BEGIN CERTIFICATE-----)'}`);
    }
  }
  if (keyText !== null) {
    try {
      key = createPrivateKey(keyText);
    } catch {
      problems.push(`${KEY}: ${keyFile} ${keyText.trim() === '' ? 'is empty' : 'holds no unencrypted PEM private key (-----BEGIN PRIVATE KEY-----)'}`);
    }
  }
  if (cert === null || key === null) return problems;
  if (!cert.checkPrivateKey(key)) {
    return [`${CERT} and ${KEY}: the key in ${keyFile} does not belong to the certificate in ${certFile}`];
  }
  try {
    createSecureContext({ cert: certText!, key: keyText! });
  } catch (err) {
    return [`${CERT} and ${KEY}: the pair cannot serve TLS: ${(err as Error).message}`];
  }
  return [];
}
