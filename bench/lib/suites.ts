// The TLS 1.3 suite order every server in the bench prefers, Portico's own (src/edge/listeners.ts):
// AES-128-GCM first. The clients here (wrk, Node) list AES-256-GCM-SHA384 first, which costs a server
// ~27 µs more per full handshake; giving every anchor Portico's preference keeps the work equal.
import { DEFAULT_CIPHERS } from 'node:tls';

export const TLS13_SUITES = 'TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256';

/** Options for a bare Node server: the order above for TLS 1.3, Node's default list for TLS 1.2. */
export const nodeServerSuites = {
  ciphers: [TLS13_SUITES, ...DEFAULT_CIPHERS.split(':').filter((suite) => !suite.startsWith('TLS_'))].join(':'),
  honorCipherOrder: true,
};
