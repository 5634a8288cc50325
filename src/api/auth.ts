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

/** The active key for this header in this environment, or null. */
export async function authenticate(header: string | undefined, environment: Environment, keys: KeyStore): Promise<ApiKey | null> {
  const token = bearerToken(header);
  if (token === null || !token.startsWith(PREFIX[environment])) return null;
  const digest = hashKey(token);
  const key = await keys.findByHash(digest);
  if (!key || key.revokedAt || key.environment !== environment) return null;
  // the lookup is by hash; compare again in constant time so no path depends on partial matches
  // (hex is ASCII: latin1 copies it byte for byte, cheaper than decoding it)
  return key.hash.length === digest.length && timingSafeEqual(Buffer.from(key.hash, 'latin1'), Buffer.from(digest, 'latin1')) ? key : null;
}
