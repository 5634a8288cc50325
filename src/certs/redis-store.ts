// Certificates, challenges, locks and the ACME account key in Redis, shared by every instance.
// Locks are `SET NX PX` with an owner token, a compare-and-delete release and a compare-and-extend
// keepalive. Two sorted sets index the certificates by time, written in the same MULTI as the
// certificate: `portico:cert-renewal` (score: when the renewal window opens) for the sweep,
// `portico:cert-expiry` (score: notAfter) for metrics; `portico:cert-validity` holds
// notBefore/notAfter per hostname.
import { randomBytes, createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { RedisCommands } from '../state/redis-commands.ts';
import { renewalOpens, type CertStores, type ExpirySummary, type StoredCertificate, type Validity } from './types.ts';

const CHALLENGE_TTL_SECONDS = 3600;
const DAY_MS = 86_400_000;
const RENEWAL = 'portico:cert-renewal';
const EXPIRY = 'portico:cert-expiry';
const VALIDITY = 'portico:cert-validity';
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;
const EXTEND = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`;

// Every command goes through the state's own command path (state/redis-commands.ts), as the other
// stores' do: it waits out a connection lost a moment ago, checks a Redis that just failed before
// writing to it, holds a write while a Cluster moves the state slot, and counts Redis's errors by kind.
// A certificate, the ACME account key and a lock are acknowledged writes (`write`: they wait for
// replicas, DESIGN §8): a certificate lost in a failover is an order made twice, a lock lost in one is
// two instances ordering the same name.
export function openRedisCertStores({ client, call, write }: RedisCommands, directoryUrl: string): CertStores {
  client.defineCommand('porticoRelease', { numberOfKeys: 1, lua: RELEASE });
  const release = (client as unknown as { porticoRelease(key: string, token: string): Promise<number> }).porticoRelease.bind(client);
  client.defineCommand('porticoExtend', { numberOfKeys: 1, lua: EXTEND });
  const extend = (client as unknown as { porticoExtend(key: string, token: string, ttlMs: number): Promise<number> }).porticoExtend.bind(client);
  const accountKey = `portico:acme-account:${createHash('sha256').update(directoryUrl).digest('hex').slice(0, 16)}`;
  return {
    certificates: {
      get: async (hostname) => {
        const text = await call(() => client.get(`portico:cert:${hostname}`));
        return text === null ? null : (JSON.parse(text) as StoredCertificate);
      },
      put: async (certificate) => {
        const { hostname, notBefore, notAfter } = certificate;
        await write(() =>
          client
            .multi()
            .set(`portico:cert:${hostname}`, JSON.stringify(certificate))
            .hset(VALIDITY, hostname, JSON.stringify({ notBefore, notAfter }))
            .zadd(RENEWAL, Math.floor(renewalOpens(notBefore, notAfter)), hostname)
            .zadd(EXPIRY, Date.parse(notAfter), hostname)
            .exec()
            .then(failedInside),
        );
      },
      remove: async (hostname) => {
        await write(() => client.multi().del(`portico:cert:${hostname}`).hdel(VALIDITY, hostname).zrem(RENEWAL, hostname).zrem(EXPIRY, hostname).exec().then(failedInside));
      },
      due: async (until) => {
        const hostnames = await call(() => client.zrangebyscore(RENEWAL, '-inf', until));
        const out: Validity[] = [];
        for (let i = 0; i < hostnames.length; i += 1000) {
          const chunk = hostnames.slice(i, i + 1000);
          const texts = await call(() => client.hmget(VALIDITY, ...chunk));
          chunk.forEach((hostname, j) => {
            if (texts[j] !== null) out.push({ hostname, ...(JSON.parse(texts[j]!) as { notBefore: string; notAfter: string }) });
          });
        }
        return out;
      },
      summary: async (now) => {
        const results = await call(() =>
          client
            .multi()
            .zcard(EXPIRY)
            .zcount(EXPIRY, '-inf', `(${now + 7 * DAY_MS}`)
            .zcount(EXPIRY, '-inf', `(${now + 30 * DAY_MS}`)
            .zrange(EXPIRY, '0', '0', 'WITHSCORES')
            .exec(),
        );
        const [total, lt7d, lt30d] = [0, 1, 2].map((i) => Number(results?.[i]?.[1] ?? 0));
        const first = (results?.[3]?.[1] ?? []) as string[];
        return { earliest: first.length === 2 ? Number(first[1]) : null, lt7d, lt30d: lt30d - lt7d, ge30d: total - lt30d } satisfies ExpirySummary;
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
        const done = await write(() => client.set(`portico:lock:${name}`, token, 'PX', ttlMs, 'NX'));
        return done === null ? null : token;
      },
      release: async (name, token) => {
        await call(() => release(`portico:lock:${name}`, token));
      },
      extend: async (name, token, ttlMs) => (await call(() => extend(`portico:lock:${name}`, token, ttlMs))) === 1,
    },
    accountKey: {
      load: () => call(() => client.get(accountKey)),
      save: async (pem) => {
        // first writer wins: two instances creating an account at once keep one key
        await write(() => client.set(accountKey, pem, 'NX'));
      },
    },
  };
}

/** EXEC's answer holds each command's outcome: one that failed inside the transaction is the write's error */
function failedInside(results: Array<[Error | null, unknown]> | null): void {
  const failed = results?.find(([err]) => err !== null);
  if (failed) throw failed[0];
  if (results === null) throw new Error('the transaction was not run (EXEC answered nil)');
}
