// Pure decision math shared by both backends. The Redis script only does the atomic part (check,
// count, refusals, ban) and returns raw counts; the headers are computed here for both, so the two
// backends cannot drift apart on what a client sees.
import type { Decision, Limit } from './limiter.ts';

export const MINUTE_MS = 60_000;
// Unix time has no leap seconds, so every UTC midnight is a multiple of 86,400,000 ms.
export const DAY_MS = 86_400_000;

export function windowStart(nowMs: number, sizeMs: number): number {
  return nowMs - (nowMs % sizeMs);
}

export interface WindowUse {
  limit: number;
  /** requests counted in this window before the current one */
  used: number;
  endMs: number;
}

export function isAllowed(minute: WindowUse, day: WindowUse): boolean {
  return minute.used < minute.limit && day.used < day.limit;
}

export function retryAfterSeconds(endMs: number, nowMs: number): number {
  return Math.max(1, Math.ceil((endMs - nowMs) / 1000));
}

export function windowDecision(minute: WindowUse, day: WindowUse, nowMs: number): Decision {
  if (isAllowed(minute, day)) {
    const minuteLeft = minute.limit - minute.used - 1;
    const dayLeft = day.limit - day.used - 1;
    // Tie goes to the day: the longer window is the one a client has to plan around.
    const reported = minuteLeft < dayLeft ? minute : day;
    return {
      allowed: true,
      reason: 'ok',
      limit: reported.limit,
      remaining: Math.min(minuteLeft, dayLeft),
      reset: Math.ceil(reported.endMs / 1000),
      retryAfter: 0,
    };
  }
  // The day never ends before the minute, so when both are exhausted the day is the honest wait.
  const reported = day.used >= day.limit ? day : minute;
  return {
    allowed: false,
    reason: 'rate_limited',
    limit: reported.limit,
    remaining: 0,
    reset: Math.ceil(reported.endMs / 1000),
    retryAfter: retryAfterSeconds(reported.endMs, nowMs),
  };
}

export function bannedDecision(limit: Limit, banEndMs: number, nowMs: number): Decision {
  return {
    allowed: false,
    reason: 'key_banned',
    limit: limit.perMinute,
    remaining: 0,
    reset: Math.ceil(banEndMs / 1000),
    retryAfter: retryAfterSeconds(banEndMs, nowMs),
  };
}

export function windowsAt(limit: Limit, usedMinute: number, usedDay: number, nowMs: number): [WindowUse, WindowUse] {
  return [
    { limit: limit.perMinute, used: usedMinute, endMs: windowStart(nowMs, MINUTE_MS) + MINUTE_MS },
    { limit: limit.perDay, used: usedDay, endMs: windowStart(nowMs, DAY_MS) + DAY_MS },
  ];
}
