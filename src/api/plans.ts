// plan → limit. Enterprise accounts carry their own; the others come from configuration, so a
// changed plan or config applies to the very next request.
import type { Config } from '../config.ts';
import type { Limit } from '../ratelimit/limiter.ts';
import type { Account } from '../state/types.ts';

export function limitFor(account: Account | null, config: Config): Limit {
  if (!account) return config.ratelimit.plans.free;
  if (account.plan === 'enterprise') return account.limits ?? config.ratelimit.plans.free;
  return config.ratelimit.plans[account.plan];
}
