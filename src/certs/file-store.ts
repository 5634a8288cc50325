// Certificates on disk in the certs dir (embedded mode): `<certs dir>/live/<hostname>/{cert.pem,key.pem,meta.json}`
// written atomically (temp file + rename), keys 0600. Challenges and locks live in memory: one
// process owns the embedded state.
//
// Renewal index: `<certs dir>/renewals/<YYYY-MM-DD>`, one file per UTC day on which renewal windows
// open (renewalOpens), a line `<opens ms> <notBefore ms> <notAfter ms> <hostname>` per certificate. A
// sweep reads the files of days up to today, nothing else; metrics read every file, now and then.
// A put writes the new line before the certificate and drops the old line after it, so a stored
// certificate always has its line; a crash in between can leave a line that no longer matches
// meta.json, which a sweep drops when it comes due (meta.json is the truth).
import { appendFileSync, existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { readFile, readdir } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { writeAtomic } from './fallback.ts';
import { renewalOpens, type CertStores, type ExpirySummary, type StoredCertificate, type Validity } from './types.ts';

const HOSTNAME = /^[a-z0-9.-]+$/;
const DAY = /^\d{4}-\d{2}-\d{2}$/;
const DAY_MS = 86_400_000;

type Meta = Omit<StoredCertificate, 'certPem' | 'keyPem'>;

export function openFileCertStores(certsDir: string, directoryUrl: string): CertStores {
  const live = path.join(certsDir, 'live');
  const renewals = path.join(certsDir, 'renewals');
  mkdirSync(live, { recursive: true, mode: 0o700 });
  mkdirSync(renewals, { recursive: true, mode: 0o700 });
  const dirOf = (hostname: string) => {
    // hostnames are normalised before they get here; refuse anything that could climb out
    if (!HOSTNAME.test(hostname) || hostname.includes('..')) throw new Error(`not a hostname: ${JSON.stringify(hostname)}`);
    return path.join(live, hostname);
  };
  const readMeta = (hostname: string): Meta | null => {
    try {
      return JSON.parse(readFileSync(path.join(dirOf(hostname), 'meta.json'), 'utf8')) as Meta;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw new Error(`reading the certificate of ${hostname}`, { cause: err });
    }
  };
  const challenges = new Map<string, string>();
  const locks = new Map<string, { token: string; until: number }>();

  // index lines this process has checked against meta.json (until a put or remove drops them)
  const checked = new Set<string>();
  // changes to the index files, one at a time (a rewrite must not lose an append)
  let queue: Promise<unknown> = Promise.resolve();
  const serial = <T>(work: () => T | Promise<T>): Promise<T> => {
    const run = queue.then(work);
    queue = run.catch(() => undefined);
    return run;
  };
  const lineOf = (hostname: string, meta: { notBefore: string; notAfter: string }) =>
    `${Math.floor(renewalOpens(meta.notBefore, meta.notAfter))} ${Date.parse(meta.notBefore)} ${Date.parse(meta.notAfter)} ${hostname}`;
  const fileOfLine = (line: string) => path.join(renewals, new Date(Number(line.slice(0, line.indexOf(' ')))).toISOString().slice(0, 10));
  const dropLines = (file: string, lines: Set<string>) => {
    for (const line of lines) checked.delete(line);
    if (!existsSync(file)) return;
    const kept = readFileSync(file, 'utf8').split('\n').filter((l) => l !== '' && !lines.has(l));
    if (kept.length === 0) rmSync(file, { force: true });
    else writeAtomic(file, `${kept.join('\n')}\n`, 0o600);
  };
  const days = async (): Promise<string[]> => (await readdir(renewals)).filter((name) => DAY.test(name)).sort();

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
      put: (certificate) =>
        serial(() => {
          const dir = dirOf(certificate.hostname);
          mkdirSync(dir, { recursive: true, mode: 0o700 });
          const { certPem, keyPem, ...meta } = certificate;
          const previous = readMeta(certificate.hostname);
          const line = lineOf(certificate.hostname, meta);
          const old = previous && lineOf(certificate.hostname, previous);
          if (old !== line) appendFileSync(fileOfLine(line), `${line}\n`, { mode: 0o600 });
          // key and certificate first, meta last: a reader finds meta only once both are in place
          writeAtomic(path.join(dir, 'key.pem'), keyPem, 0o600);
          writeAtomic(path.join(dir, 'cert.pem'), certPem, 0o644);
          writeAtomic(path.join(dir, 'meta.json'), JSON.stringify(meta), 0o644);
          if (old && old !== line) dropLines(fileOfLine(old), new Set([old]));
        }),
      remove: (hostname) =>
        serial(() => {
          const previous = readMeta(hostname);
          rmSync(dirOf(hostname), { recursive: true, force: true });
          if (previous) {
            const old = lineOf(hostname, previous);
            dropLines(fileOfLine(old), new Set([old]));
          }
        }),
      due: async (until) => {
        const out: Validity[] = [];
        const last = new Date(until).toISOString().slice(0, 10);
        for (const day of await days()) {
          if (day > last) break;
          const file = path.join(renewals, day);
          const stale = new Set<string>();
          for (const line of (await readFile(file, 'utf8').catch(() => '')).split('\n')) {
            const [opens, notBefore, notAfter, hostname] = line.split(' ');
            if (!hostname || Number(opens) > until) continue;
            if (!checked.has(line)) {
              const meta = HOSTNAME.test(hostname) ? readMeta(hostname) : null;
              if (!meta || lineOf(hostname, meta) !== line) {
                stale.add(line);
                continue;
              }
              checked.add(line);
            }
            out.push({ hostname, notBefore: new Date(Number(notBefore)).toISOString(), notAfter: new Date(Number(notAfter)).toISOString() });
          }
          if (stale.size > 0) await serial(() => dropLines(file, stale));
        }
        return out;
      },
      summary: async (now) => {
        const summary: ExpirySummary = { earliest: null, lt7d: 0, lt30d: 0, ge30d: 0 };
        for (const day of await days()) {
          const text = await readFile(path.join(renewals, day), 'latin1').catch(() => '');
          // the third number of each line: a day can hold many thousand lines
          for (let at = 0; at < text.length; ) {
            const end = text.indexOf('\n', at);
            const third = text.indexOf(' ', text.indexOf(' ', at) + 1) + 1;
            const notAfter = third > at && (end === -1 || third < end) ? parseInt(text.slice(third, third + 16), 10) : NaN;
            if (!Number.isNaN(notAfter)) {
              summary.earliest = summary.earliest === null ? notAfter : Math.min(summary.earliest, notAfter);
              const left = notAfter - now;
              summary[left < 7 * DAY_MS ? 'lt7d' : left < 30 * DAY_MS ? 'lt30d' : 'ge30d']++;
            }
            if (end === -1) break;
            at = end + 1;
          }
        }
        return summary;
      },
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
      extend: async (name, token, ttlMs) => {
        const held = locks.get(name);
        if (held?.token !== token || held.until <= Date.now()) return false;
        held.until = Date.now() + ttlMs;
        return true;
      },
    },
    accountKey: {
      load: async () => (existsSync(accountFile) ? readFileSync(accountFile, 'utf8') : null),
      save: async (pem) => writeAtomic(accountFile, pem, 0o600),
    },
  };
}

