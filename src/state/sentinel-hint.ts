// What a sentinel needs to let Portico in, and what to change in PORTICO_REDIS_URL when it does not
// (the sentinels' counterpart of redis-errors.ts's withUrlHint).
import type { RedisTarget } from './redis-url.ts';

/** what Portico asks of a sentinel (ioredis's discovery, the follower's events): an ACL user needs no more */
export const SENTINEL_ACL = '-@all +auth +hello +client|setname +ping +info +sentinel|get-master-addr-by-name +sentinel|sentinels +subscribe &+switch-master &+selected-slave &-failover-abort-slave-timeout';

/** A sentinel's refusal to talk to us, with what to change in the URL (never the password itself). */
export function withSentinelHint(err: Error, target: RedisTarget): Error {
  if (!err.message.startsWith('All sentinels are unreachable')) return err;
  if (/NOAUTH/.test(err.message) && !target.sentinelPassword) return new Error(`${err.message} (the sentinels require a password: add ?sentinel_password=… to PORTICO_REDIS_URL)`);
  if (/WRONGPASS|invalid password/i.test(err.message)) return new Error(`${err.message} (the sentinels refused sentinel_username/sentinel_password in PORTICO_REDIS_URL)`);
  if (/NOPERM/.test(err.message)) return new Error(`${err.message} (the sentinels' user needs ${SENTINEL_ACL})`);
  return err;
}
