// Certificates, challenges, locks and the ACME account key in Redis, shared by every instance.
// Locks are `SET NX PX` with an owner token and a compare-and-delete release.
import { randomBytes, createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { scanHash } from '../state/redis-scan.ts';
import { stateUnavailable } from '../state/types.ts';
import type { CertStores, StoredCertificate } from './types.ts';

const CHALLENGE_TTL_SECONDS = 3600;
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;

export function openRedisCertStores(client: Redis, directoryUrl: string): CertStores {
  client.defineCommand('porticoRelease', { numberOfKeys: 1, lua: RELEASE });
  const release = (client as unknown as { porticoRelease(key: string, token: string): Promise<number> }).porticoRelease.bind(client);
  const call = async <T>(run: () => Promise<T>): Promise<T> => {
    try {
      return await run();
    } catch (err) {
      throw stateUnavailable(err);
    }
  };
  const accountKey = `portico:acme-account:${createHash('sha256').update(directoryUrl).digest('hex').slice(0, 16)}`;
  return {
    certificates: {
      get: async (hostname) => {
        const text = await call(() => client.get(`portico:cert:${hostname}`));
        return text === null ? null : (JSON.parse(text) as StoredCertificate);
      },
      put: async (certificate) => {
        await call(() =>
          client
            .multi()
            .set(`portico:cert:${certificate.hostname}`, JSON.stringify(certificate))
            .hset('portico:cert-validity', certificate.hostname, JSON.stringify({ notBefore: certificate.notBefore, notAfter: certificate.notAfter }))
            .exec(),
        );
      },
      remove: async (hostname) => {
        await call(() => client.multi().del(`portico:cert:${hostname}`).hdel('portico:cert-validity', hostname).exec());
      },
      expiries: async () => {
        const all = await scanHash(client, 'portico:cert-validity', call);
        return all.map(([hostname, text]) => ({ hostname, ...(JSON.parse(text) as { notBefore: string; notAfter: string }) }));
      },
    },
    challenges: {
      get: (token) => call(() => client.get(`portico:challenge:${token}`)),
      set: async (token, keyAuthorization) => {
        await call(() => client.set(`portico:challenge:${token}`, keyAuthorization, 'EX', CHALLENGE_TTL_SECONDS));
      },
      remove: async (token) => {
        await call(() => client.del(`portico:challenge:${token}`));
      },
    },
    locks: {
      acquire: async (name, ttlMs) => {
        const token = randomBytes(12).toString('hex');
        const done = await call(() => client.set(`portico:lock:${name}`, token, 'PX', ttlMs, 'NX'));
        return done === null ? null : token;
      },
      release: async (name, token) => {
        await call(() => release(`portico:lock:${name}`, token));
      },
    },
    accountKey: {
      load: () => call(() => client.get(accountKey)),
      save: async (pem) => {
        // first writer wins: two instances creating an account at once keep one key
        await call(() => client.set(accountKey, pem, 'NX'));
      },
    },
  };
}
