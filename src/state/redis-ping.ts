// A PING whose deadline is Portico's, not ioredis's: the one that tells whether the server holding the
// state answers (redis-connect.ts's pingState, with a limit that allows for the WAITs ahead of it).
import { Command, type Redis } from 'ioredis';

// Its deadline is checked after the event loop has read what was waiting (answeredWithin): a loop
// held past the deadline (a burst of requests on a busy machine) ran ioredis's timer before reading
// the PONG already there, and the view said "Redis unreachable" while Redis had answered in time.
export function pingWithin(connection: Redis, limitMs: number): Promise<unknown> {
  const command = new Command('ping', [], { replyEncoding: 'utf8' });
  // ioredis's own timer only as a backstop well past ours (it runs before the turn's reads too): it
  // takes the command off ioredis's queue should Redis never answer
  command.setTimeout(10 * limitMs);
  return answeredWithin(connection.sendCommand(command) as Promise<unknown>, limitMs);
}

/**
 * `promise`, or a timeout after `ms` — told once the event loop has also read what was waiting when the
 * timer fired (setImmediate runs after the poll phase), so an answer already received is not taken
 * for a timeout because timers run first in a late turn.
 */
function answeredWithin<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      setImmediate(() => {
        if (settled) return;
        settled = true;
        reject(Object.assign(new Error('Command timed out'), { code: 'REDIS_TIMEOUT' }));
      });
    }, ms);
    promise.then(
      (value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(err);
      },
    );
  });
}
