// What went wrong with a Redis command, for `portico_redis_command_errors_total{kind}`: the kinds an
// operator acts on differently (a dead node, a slow one, a failover or reshard in progress).

export type RedisErrorKind = 'timeout' | 'connection' | 'moved' | 'ask' | 'readonly' | 'loading' | 'tryagain' | 'clusterdown' | 'reply';

export const REDIS_ERROR_KINDS: readonly RedisErrorKind[] = ['timeout', 'connection', 'moved', 'ask', 'readonly', 'loading', 'tryagain', 'clusterdown', 'reply'];

export function errorKind(err: unknown): RedisErrorKind {
  let e = err as { code?: string; message?: string; name?: string; cause?: unknown } | null;
  // STATE_UNAVAILABLE and the limiter's REDIS_DOWN carry the Redis error as their cause
  while (e && (e.code === 'STATE_UNAVAILABLE' || e.code === 'REDIS_DOWN') && e.cause) e = e.cause as typeof e;
  const message = e?.message ?? '';
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
