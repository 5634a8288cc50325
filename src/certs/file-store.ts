// Certificates on disk in the certs dir (embedded mode): `<certs dir>/<hostname>/{cert.pem,key.pem,meta.json}`
// written atomically (temp file + rename), keys 0600. Challenges and locks live in memory: one
// process owns the embedded state.
import { mkdirSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { readFile, readdir } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { writeAtomic } from './fallback.ts';
import type { CertStores, StoredCertificate } from './types.ts';

const HOSTNAME = /^[a-z0-9.-]+$/;

export function openFileCertStores(certsDir: string, directoryUrl: string): CertStores {
  const live = path.join(certsDir, 'live');
  mkdirSync(live, { recursive: true, mode: 0o700 });
  const dirOf = (hostname: string) => {
    // hostnames are normalised before they get here; refuse anything that could climb out
    if (!HOSTNAME.test(hostname) || hostname.includes('..')) throw new Error(`not a hostname: ${JSON.stringify(hostname)}`);
    return path.join(live, hostname);
  };
  const challenges = new Map<string, string>();
  const locks = new Map<string, { token: string; until: number }>();
  // validity of every stored certificate, read once (asynchronously) and then kept in step by put/remove
  type Validity = { notBefore: string; notAfter: string };
  let validity: Promise<Map<string, Validity>> | null = null;
  const loadValidity = async () => {
    const index = new Map<string, Validity>();
    for (const hostname of await readdir(live)) {
      try {
        const meta = JSON.parse(await readFile(path.join(live, hostname, 'meta.json'), 'utf8')) as Validity;
        index.set(hostname, { notBefore: meta.notBefore, notAfter: meta.notAfter });
      } catch {
        // no meta.json: a write interrupted before it finished, not a stored certificate
      }
    }
    return index;
  };
  const accountFile = path.join(certsDir, `acme-account-${Buffer.from(directoryUrl).toString('base64url').slice(0, 40)}.key`);

  return {
    certificates: {
      get: async (hostname) => {
        const dir = dirOf(hostname);
        try {
          const meta = JSON.parse(readFileSync(path.join(dir, 'meta.json'), 'utf8')) as Omit<StoredCertificate, 'certPem' | 'keyPem'>;
          return { ...meta, hostname, certPem: readFileSync(path.join(dir, 'cert.pem'), 'utf8'), keyPem: readFileSync(path.join(dir, 'key.pem'), 'utf8') };
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
          throw new Error(`reading the certificate of ${hostname}`, { cause: err });
        }
      },
      put: async (certificate) => {
        const dir = dirOf(certificate.hostname);
        mkdirSync(dir, { recursive: true, mode: 0o700 });
        const { certPem, keyPem, ...meta } = certificate;
        // key and certificate first, meta last: a reader finds meta only once both are in place
        writeAtomic(path.join(dir, 'key.pem'), keyPem, 0o600);
        writeAtomic(path.join(dir, 'cert.pem'), certPem, 0o644);
        writeAtomic(path.join(dir, 'meta.json'), JSON.stringify(meta), 0o644);
        if (validity) (await validity).set(certificate.hostname, { notBefore: meta.notBefore, notAfter: meta.notAfter });
      },
      remove: async (hostname) => {
        rmSync(dirOf(hostname), { recursive: true, force: true });
        if (validity) (await validity).delete(hostname);
      },
      expiries: async () => [...(await (validity ??= loadValidity()))].map(([hostname, v]) => ({ hostname, ...v })),
    },
    challenges: {
      get: async (token) => challenges.get(token) ?? null,
      set: async (token, keyAuthorization) => {
        challenges.set(token, keyAuthorization);
      },
      remove: async (token) => {
        challenges.delete(token);
      },
    },
    locks: {
      acquire: async (name, ttlMs) => {
        const held = locks.get(name);
        if (held && held.until > Date.now()) return null;
        const token = randomBytes(12).toString('hex');
        locks.set(name, { token, until: Date.now() + ttlMs });
        return token;
      },
      release: async (name, token) => {
        if (locks.get(name)?.token === token) locks.delete(name);
      },
    },
    accountKey: {
      load: async () => (existsSync(accountFile) ? readFileSync(accountFile, 'utf8') : null),
      save: async (pem) => writeAtomic(accountFile, pem, 0o600),
    },
  };
}
