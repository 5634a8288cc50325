// SecureContexts for certificates read from storage, made quickly when a handshake waits for one.
//
// Most of what tls.createSecureContext costs does not depend on the certificate: OpenSSL 3's
// SSL_CTX_new and Node's default ciphers and curves take 0.3–0.7 ms here, loading a P-256 key and
// its chain about 0.2 ms. So a few empty contexts are made ahead of need, one at a time and 10 ms
// after a spare was taken (not in the middle of the handshake that took it), and a cold handshake
// only loads its certificate and key into one: 0.6–1.2 ms less to its first byte here.
//
// Loading uses the context's own setCert/setKey, the methods tls.createSecureContext itself calls
// for `cert` and `key` (in that order: the key is checked against the certificate). They are not a
// documented API: when they are missing, every context is made the documented way.
import tls from 'node:tls';

interface Loadable {
  setCert(cert: string): void;
  setKey(key: string, passphrase: string | undefined): void;
}

const REFILL_DELAY_MS = 10;

export interface ContextMaker {
  /** a context serving `cert` (leaf then chain, PEM) with `key`; throws as createSecureContext does */
  make(cert: string, key: string): tls.SecureContext;
  /** how many empty contexts wait (for tests) */
  readonly ready: number;
}

/** `spare`: empty contexts kept ready; 0 makes every context the documented way. */
export function createContextMaker(spare = 2): ContextMaker {
  const ready: tls.SecureContext[] = [];
  let filling = false;
  const loadable = (context: tls.SecureContext) => (context as unknown as { context?: Partial<Loadable> }).context;
  const first = spare > 0 ? tls.createSecureContext() : undefined;
  const probe = first && loadable(first);
  const supported = typeof probe?.setCert === 'function' && typeof probe.setKey === 'function';
  if (supported) ready.push(first!);

  const fill = () => {
    if (ready.length >= spare) {
      filling = false;
      return;
    }
    ready.push(tls.createSecureContext());
    setTimeout(fill, REFILL_DELAY_MS).unref();
  };
  const refill = () => {
    if (!supported || filling) return;
    filling = true;
    setTimeout(fill, REFILL_DELAY_MS).unref();
  };
  refill();

  return {
    make(cert, key) {
      const context = ready.pop();
      refill();
      if (context === undefined) return tls.createSecureContext({ cert, key });
      // a failure leaves this context half made: it is dropped, and the error is the caller's
      const native = loadable(context) as Loadable;
      native.setCert(cert);
      native.setKey(key, undefined);
      return context;
    },
    get ready() {
      return ready.length;
    },
  };
}
