// What went wrong with a Redis command, for `portico_redis_command_errors_total{kind}`: the kinds an
// operator acts on differently (a dead node, a slow one, a failover or reshard in progress). And what
// to change in PORTICO_REDIS_URL or the environment when a connection fails in a way that says so.
import type { RedisTarget } from './redis-url.ts';

export type RedisErrorKind = 'timeout' | 'connection' | 'moved' | 'ask' | 'readonly' | 'loading' | 'tryagain' | 'clusterdown' | 'reply';

export const REDIS_ERROR_KINDS: readonly RedisErrorKind[] = ['timeout', 'connection', 'moved', 'ask', 'readonly', 'loading', 'tryagain', 'clusterdown', 'reply'];

const GAVE_UP = /^Too many Cluster redirections\. Last error: (?:\w*Error: )?/;

export function errorKind(err: unknown): RedisErrorKind {
  let e = err as { code?: string; message?: string; name?: string; cause?: unknown } | null;
  // STATE_UNAVAILABLE and the limiter's REDIS_DOWN carry the Redis error as their cause
  while (e && (e.code === 'STATE_UNAVAILABLE' || e.code === 'REDIS_DOWN') && e.cause) e = e.cause as typeof e;
  // ioredis's Cluster gives up after its redirects with the last error in its own message
  const message = (e?.message ?? '').replace(GAVE_UP, '');
  if (e?.code === 'REDIS_TIMEOUT' || /timed? ?out/i.test(message)) return 'timeout';
  const first = message.split(' ')[0];
  if (first === 'MOVED') return 'moved';
  if (first === 'ASK') return 'ask';
  if (first === 'READONLY') return 'readonly';
  if (first === 'LOADING') return 'loading';
  if (first === 'TRYAGAIN') return 'tryagain';
  if (first === 'CLUSTERDOWN') return 'clusterdown';
  if (e?.name === 'ReplyError' || /^[A-Z]+ /.test(message)) return 'reply';
  return 'connection';
}

/** Node's advice for a certificate it cannot verify: the system's CA store, wrong for the private CA a Redis most often has */
const SYSTEM_CA_ADVICE = /; if the root CA is installed locally, try running Node\.js with\s+--use-system-ca$/;
/** a certificate chain that ends at no CA Node trusts (not a wrong name, not an expired one) */
const UNTRUSTED = new Set(['DEPTH_ZERO_SELF_SIGNED_CERT', 'SELF_SIGNED_CERT_IN_CHAIN', 'UNABLE_TO_GET_ISSUER_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'CERT_UNTRUSTED']);

/** a certificate the client will refuse again at every try: untrusted, for another name, out of its dates */
const UNVERIFIABLE = new Set([...UNTRUSTED, 'ERR_TLS_CERT_ALTNAME_INVALID', 'CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID']);

/** Trying again answers the same until the URL, the password or the certificate changes: wrong or missing credentials, a certificate Portico cannot verify. */
export function settledByConfiguration(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  const message = (err as Error)?.message ?? '';
  return (typeof code === 'string' && UNVERIFIABLE.has(code)) || /^(NOAUTH|WRONGPASS)\b/.test(message) || NOT_REDIS.test(message);
}

/** the client's words for an answer that is no RESP at all (an HTTP server's `HTTP/1.1 …`), and its request for a bug report that follows */
const NOT_REDIS = /^(Unknown RESP type|Protocol error, got)\b/;
const REPORT_REQUEST = /\. Please report this\.$/;

/** what of PORTICO_REDIS_URL a hint needs; the password only to know whether there is one */
export type UrlShape = Pick<RedisTarget, 'mode' | 'tls' | 'password'>;

/**
 * A connection's error with what to change, in the form of the sentinels' hints (sentinel-hint.ts):
 * Redis's or Node's words, then "(why: what to do)". `answered`: the server has answered on this
 * connection before (a reset then says nothing about TLS). The hint names no credential; Node's
 * --use-system-ca advice is dropped (a private CA goes in NODE_EXTRA_CA_CERTS, README *Configuration*).
 */
export function withUrlHint(err: Error, url: UrlShape, answered: boolean): Error {
  const hint = urlHint(err, url, answered);
  if (hint === null) return err;
  return Object.assign(new Error(`${err.message.replace(SYSTEM_CA_ADVICE, '').replace(REPORT_REQUEST, '')} (${hint})`, { cause: err }), { code: (err as { code?: unknown }).code });
}

function urlHint(err: Error, url: UrlShape, answered: boolean): string | null {
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && UNTRUSTED.has(code)) return `the ${url.mode === 'cluster' ? "nodes'" : "server's"} certificate is not trusted: give Portico the CA that signed it with NODE_EXTRA_CA_CERTS=<ca file>`;
  // a TLS-only port takes the plain HELLO for a broken handshake and resets the connection
  if (code === 'ECONNRESET' && !url.tls && !answered) return `the server reset the connection without answering: it seems to expect TLS, ${scheme({ ...url, tls: true })}://…`;
  if (NOT_REDIS.test(err.message)) return "the server at that port does not speak Redis: is PORTICO_REDIS_URL's port Redis's?";
  if (err.message.startsWith('NOAUTH') && !url.password) return `the server requires a password: PORTICO_REDIS_URL needs the user and password, ${withCredentials(url)}`;
  return null;
}

function scheme({ mode, tls }: UrlShape): string {
  return `redis${tls ? 's' : ''}${mode === 'standalone' ? '' : `+${mode}`}`;
}

/** PORTICO_REDIS_URL's form for this topology with user and password (README "Redis topologies") */
function withCredentials(url: UrlShape): string {
  const where = url.mode === 'sentinel' ? 'host:port/<primary name>' : url.mode === 'cluster' ? 'host:port,…' : 'host:port';
  return `${scheme(url)}://user:password@${where}`;
}
