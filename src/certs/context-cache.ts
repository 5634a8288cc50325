// The SNI cache: the SecureContext of each hostname served lately (LRU, bounded), so that a
// handshake that hits it needs no disk or Redis read. The manager checks an entry's notAfter as it
// reads it and drops a hostname's entry on that domain's notice.
import tls from 'node:tls';
import { LRUCache } from 'lru-cache';
import { afterReads } from '../after-reads.ts';
import { createContextMaker } from './secure-contexts.ts';
import type { StoredCertificate } from './types.ts';

export function createContextCache(max: number) {
  // Each SecureContext holds ~37 KiB of OpenSSL memory that V8 does not see, so a context the LRU
  // drops would live on until some unrelated full collection: the bound would hold entries, not
  // memory (RSS grew ~35 MiB per 1,000 new names past it). A dropped context is therefore closed on
  // the next turn of the event loop: the handshake that was just handed it installs it when its
  // SNI callback runs, in this turn's microtasks (the OCSP answer comes synchronously too), and a
  // connection keeps its own reference to what it installed. Closing it any later only holds memory:
  // under a flood of new names, a second's worth of dropped contexts.
  const retire = (context: tls.SecureContext) => afterReads(() => closeContext(context));
  const cache = new LRUCache<string, { context: tls.SecureContext; notAfter: number }>({ max, dispose: (entry) => retire(entry.context) });
  // a cold handshake loads its certificate into a context made ahead (about 0.2 ms instead of 0.5–1)
  const contexts = createContextMaker();

  return {
    get: (hostname: string) => cache.get(hostname),
    contextFor(stored: StoredCertificate): tls.SecureContext {
      const entry = { context: contexts.make(stored.certPem, stored.keyPem), notAfter: Date.parse(stored.notAfter) };
      cache.set(stored.hostname, entry);
      return entry.context;
    },
    delete: (hostname: string) => cache.delete(hostname),
    clear: () => cache.clear(),
    get size() {
      return cache.size;
    },
  };
}

/** Frees a SecureContext's OpenSSL state now (node's own close, not in its typings; absent: left to GC). */
function closeContext(context: tls.SecureContext): void {
  (context as { context?: { close?: () => void } }).context?.close?.();
}
