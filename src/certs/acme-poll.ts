// Polling an ACME authorisation or order until the CA settles it (RFC 8555 §7.5.1, POST-as-GET).
// acme-client's own waitForValidStatus looks again after any error answer; this one stops at an answer
// that will not change.

// acme-client's own bounds: 10 looks, the wait doubling up to 30 s
const POLL_LOOKS = 10;
const POLL_MAX_WAIT_MS = 30_000;
// what the CA is still working on (RFC 8555 §7.1.6); `ready` is an order finalize has not moved yet
const UNSETTLED = new Set(['pending', 'processing', 'ready']);

/** What the issuer read off the last answer of a look (acme-trace.ts's interceptors fill it in). */
export interface LookTrace {
  problem?: unknown;
  transportError?: Error;
  /** the HTTP status of the last answer */
  status?: number;
}

/**
 * Polls until the CA settles the item, within acme-client's bounds (10 looks, the wait doubling from
 * `backoffMin` to 30 s, about 90 s in all), but an error answer does not always cost another look:
 * - a 4xx problem other than 429 ends the wait at once: the CA no longer knows the account or the
 *   order (as after a restart of a CA that keeps them in memory) or refuses the request, and asking
 *   again gets the same answer. The caller's next step (registering again and ordering once more,
 *   the next issuer, the backoff) then starts at once instead of after ~90 s;
 * - a 5xx, a 429 or a failed connection may pass by itself (a CA restarting, overloaded): it costs
 *   one look, like an answer that is still pending.
 */
export async function settle<T extends { status: string }>(trace: LookTrace, what: string, backoffMin: number, look: () => Promise<T>): Promise<T> {
  let wait = backoffMin;
  for (let looks = 1; ; looks += 1) {
    // what classify() (acme-trace.ts) reads is the last look's
    delete trace.problem;
    delete trace.transportError;
    delete trace.status;
    let item: T | undefined;
    let failure: unknown = null;
    try {
      item = await look();
    } catch (err) {
      failure = err;
      if (refusedForGood(trace)) throw err;
    }
    if (item?.status === 'valid') return item;
    if (item !== undefined && !UNSETTLED.has(item.status)) throw new Error(`the CA found the ${what} ${item.status}`);
    if (looks === POLL_LOOKS) throw failure ?? new Error(`the CA had not finished the ${what} after ${POLL_LOOKS} looks`);
    await new Promise((r) => setTimeout(r, wait));
    wait = Math.min(wait * 2, POLL_MAX_WAIT_MS);
  }
}

/** the last answer was a 4xx other than 429: the CA means it, asking again gets the same */
function refusedForGood(trace: LookTrace): boolean {
  const status = trace.status ?? 0;
  return status >= 400 && status < 500 && status !== 429;
}
