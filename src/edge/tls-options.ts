// The HTTPS listener's TLS settings: protocol floor, cipher suites in the server's order, key exchange
// groups. Apart from the listener because they are policy, changed for their own reasons, and the bench
// serves its anchors with the same suites (through listeners.ts, which re-exports them).
import { createSecureContext } from 'node:tls';

// Mozilla "intermediate": TLS 1.2 with AEAD + forward secrecy only; TLS 1.3 suites are all AEAD.
// The server's order decides (honorCipherOrder), in TLS 1.3 too: AES-128-GCM first, as Mozilla's list
// and Go (so Caddy and Traefik) do. Node's own TLS 1.3 default starts at AES-256-GCM-SHA384, which
// clients built on OpenSSL (curl, wrk, Node, Python) also list first: its SHA-384 transcript and key
// schedule cost ~27 µs more server CPU per full handshake here, and its bulk encryption more per byte.
// The bench gives its anchors the same order (bench/lib/nginx.ts, bench/bare-*.ts).
export const TLS13_SUITES = 'TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256';
export const CIPHERS = [
  TLS13_SUITES,
  'ECDHE-ECDSA-AES128-GCM-SHA256', 'ECDHE-RSA-AES128-GCM-SHA256', 'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384', 'ECDHE-ECDSA-CHACHA20-POLY1305', 'ECDHE-RSA-CHACHA20-POLY1305',
].join(':');

// Key exchange by default (https.keyExchange replaces it): the hybrid post-quantum X25519MLKEM768
// first, as current browsers and Caddy do (a connection recorded today cannot be decrypted later by a
// quantum computer), then X25519 and the NIST curves for every other client. A Node whose OpenSSL
// lacks ML-KEM (before 3.5) gets the classical list.
const CLASSICAL_GROUPS = 'X25519:P-256:P-384';
function keyExchangeGroups(): string {
  const hybrid = `X25519MLKEM768:${CLASSICAL_GROUPS}`;
  try {
    createSecureContext({ ecdhCurve: hybrid });
    return hybrid;
  } catch {
    return CLASSICAL_GROUPS;
  }
}

// given again with every fallback certificate (setFallback): setSecureContext puts back Node's defaults
// for whatever it is not given
export function tlsOptions(keyExchange: string[] | null) {
  return { minVersion: 'TLSv1.2' as const, ciphers: CIPHERS, honorCipherOrder: true, ecdhCurve: keyExchange?.join(':') ?? keyExchangeGroups() };
}
