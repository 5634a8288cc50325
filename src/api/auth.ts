// Bearer keys (RFC 6750). A key is `pk_live_` (production) or `pk_test_` (staging) + 32 random bytes
// in base64url; only its SHA-256 is stored. Anything that is not an active key of the request's
// environment — missing, another scheme, malformed, unknown, revoked — is the same 401.
import { hash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { ApiKey, Environment, KeyStore } from '../state/types.ts';

const PREFIX: Record<Environment, string> = { production: 'pk_live_', staging: 'pk_test_' };
const KEY_SHAPE = /^pk_(live|test)_[A-Za-z0-9_-]{43}$/;

export function generateKey(environment: Environment): { key: string; hash: string } {
  const key = PREFIX[environment] + randomBytes(32).toString('base64url');
  return { key, hash: hashKey(key) };
}

export function hashKey(key: string): string {
  // one-shot: no Hash object per request (about 0.8 µs against 1.4 µs for createHash().update().digest())
  return hash('sha256', key, 'hex');
}

/** The bearer token of an Authorization header, or null when there is none of the right shape. */
export function bearerToken(header: string | undefined): string | null {
  if (!header || header.length > 200) return null;
  let token: string;
  // the spelling nearly every client sends; the scheme is case-insensitive (RFC 9110 §11.1)
  if (header.startsWith('Bearer ')) token = header.slice(7).trim();
  else {
    const space = header.indexOf(' ');
    if (space === -1 || header.slice(0, space).toLowerCase() !== 'bearer') return null;
    token = header.slice(space + 1).trim();
  }
  return KEY_SHAPE.test(token) ? token : null;
}

/** Authorization headers remembered with their key's digest: the same few keys call again and again. */
const DIGESTS_MAX = 4_096;

interface Digest {
  environment: Environment;
  hex: string;
  bytes: Buffer;
}

/**
 * Finds the active key for an Authorization header in an environment, or null.
 *
 * A well-formed header's token digest is remembered (up to DIGESTS_MAX headers, the oldest forgotten
 * first): it never changes, and parsing and hashing it on every call were ~5 % of a /v1 call's CPU.
 * Only the digest decides: a revoked or changed key is found, or not, in the store as before. The
 * headers held are ones that also pass through this process's memory in every request carrying them.
 */
export function createAuthenticator(keys: KeyStore): (header: string | undefined, environment: Environment) => Promise<ApiKey | null> {
  const digests = new Map<string, Digest>();
  // the store hands out the same ApiKey object until the key changes
  const stored = new WeakMap<ApiKey, Buffer>();
  const digestOf = (header: string | undefined): Digest | null => {
    if (header === undefined) return null;
    let digest = digests.get(header);
    if (digest === undefined) {
      const token = bearerToken(header);
      if (token === null) return null;
      const hex = hashKey(token);
      // hex is ASCII: latin1 copies it byte for byte, cheaper than decoding it
      digest = { environment: token.startsWith(PREFIX.production) ? 'production' : 'staging', hex, bytes: Buffer.from(hex, 'latin1') };
      if (digests.size >= DIGESTS_MAX) digests.delete(digests.keys().next().value!);
      digests.set(header, digest);
    }
    return digest;
  };
  return async (header, environment) => {
    const digest = digestOf(header);
    if (digest === null || digest.environment !== environment) return null;
    const key = await keys.findByHash(digest.hex);
    if (!key || key.revokedAt || key.environment !== environment) return null;
    let bytes = stored.get(key);
    if (bytes === undefined) stored.set(key, (bytes = Buffer.from(key.hash, 'latin1')));
    // the lookup is by hash; compare again in constant time so no path depends on partial matches
    return bytes.length === digest.bytes.length && timingSafeEqual(bytes, digest.bytes) ? key : null;
  };
}
