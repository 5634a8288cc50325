// One view of Redis for an instance: what portico_redis_up, the "Redis unreachable" / "Redis is back"
// lines and /readyz say.
export interface RedisWatch {
  readonly up: boolean;
  /** PINGs the state now; resolves with whether Redis is up (connected, answering, limiter's breaker closed) */
  check(): Promise<boolean>;
  /**
   * check(), for /readyz: 'partly' when Redis is not up only because the limiter cannot reach some of a
   * Cluster's primaries while it reaches others (the state's server answering): the subjects counted on
   * those others are served as usual
   */
  readiness(): Promise<'up' | 'partly' | 'down'>;
  /** re-reads the connection and the limiter (after one of their events) */
  update(): void;
  stop(): void;
}

/**
 * One view of Redis for portico_redis_up, the "Redis unreachable" / "Redis is back" lines and /readyz:
 * connected, its last PING of the state answered, and the limiter's breaker closed. The PING runs
 * every `everyMs` by itself and for each /readyz: a frozen Redis (SIGSTOP, a stalled network) keeps
 * its connection and sends no event, and with no /v1 request the limiter never calls it either.
 */
export function watchRedis(deps: { ping(): Promise<boolean>; connected(): boolean; limiterUp(): boolean; limiterPartly?(): boolean; onChange(up: boolean): void }, everyMs = 1000): RedisWatch {
  let answered = true;
  let up = deps.connected();
  // a PING's answer counts only if none sent after it has answered already
  let sent = 0;
  let heard = 0;
  let timer: NodeJS.Timeout | null = null;
  const update = (): boolean => {
    const now = deps.connected() && answered && deps.limiterUp();
    if (now !== up) {
      up = now;
      deps.onChange(up);
    }
    return now;
  };
  const check = async (): Promise<boolean> => {
    const n = ++sent;
    const ok = await deps.ping();
    if (n > heard) {
      heard = n;
      answered = ok;
    }
    return update();
  };
  const next = () => {
    timer = setTimeout(() => void check().finally(() => timer && next()), everyMs).unref();
  };
  next();
  return {
    get up() {
      return up;
    },
    check,
    readiness: async () => ((await check()) ? 'up' : deps.connected() && answered && deps.limiterPartly?.() ? 'partly' : 'down'),
    update: () => void update(),
    stop: () => {
      if (timer) clearTimeout(timer);
      timer = null;
    },
  };
}
