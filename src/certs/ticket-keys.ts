// TLS session ticket keys (RFC 5077 / TLS 1.3 PSK tickets): one 48-byte key per rotation period,
// the same on every worker and instance so a client resumes wherever its next connection lands.
// With Redis the first instance to reach a new period creates its key (SET NX) and the others read
// it; embedded, the key lives in the data dir (0600) so a restart keeps resumption working.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Redis } from 'ioredis';
import { writeAtomic } from './fallback.ts';
import { unavailableOnError } from '../state/types.ts';
import type { Guard } from '../state/redis-cache.ts';

export interface TicketKeySource {
  /** the key for the period `period` (a whole number of rotation periods since the epoch) */
  keyFor(period: number): Promise<Buffer>;
}

/** `call`: the state's command path (state/redis-commands.ts); a plain client's errors are STATE_UNAVAILABLE */
export function redisTicketKeys(client: Redis, periodSeconds: number, call: Guard = unavailableOnError): TicketKeySource {
  return {
    async keyFor(period) {
      const name = `portico:tls-ticket-key:${period}`;
      await call(() => client.set(name, randomBytes(48).toString('base64'), 'EX', periodSeconds * 3, 'NX'));
      const stored = await call(() => client.get(name));
      if (!stored) throw new Error('ticket key vanished');
      return Buffer.from(stored, 'base64');
    },
  };
}

export function fileTicketKeys(dataDir: string): TicketKeySource {
  const file = path.join(dataDir, 'tls-ticket-key.json');
  return {
    async keyFor(period) {
      try {
        const saved = JSON.parse(readFileSync(file, 'utf8')) as { period: number; key: string };
        if (saved.period === period) return Buffer.from(saved.key, 'base64');
      } catch {
        // none yet, or unreadable: make one
      }
      const key = randomBytes(48);
      writeAtomic(file, JSON.stringify({ period, key: key.toString('base64') }), 0o600);
      return key;
    },
  };
}

/**
 * Keeps `apply` fed with the current period's key; checks every `everyMs` (a minute). The key is read
 * again at each check, not only when the period changes: a key another instance made in its place
 * (this one's lost in a Redis failover before it reached a replica) is taken up within a check, so
 * the instances share one key again instead of refusing each other's tickets until the next period.
 * A failure is reported once until a check succeeds again. Returns a stop function.
 */
export function rotateTicketKeys(source: TicketKeySource, periodSeconds: number, apply: (key: Buffer) => void, onError: (err: unknown) => void, now: () => number = Date.now, everyMs = 60_000): () => void {
  let applied: Buffer | null = null;
  // reported once per run of failures (a Redis outage), not once a minute
  let failing = false;
  const check = async () => {
    const key = await source.keyFor(Math.floor(now() / 1000 / periodSeconds));
    failing = false;
    if (applied?.equals(key)) return;
    apply(key);
    applied = key;
  };
  const run = () => check().catch((err) => {
    if (!failing) onError(err);
    failing = true;
  });
  void run();
  const timer = setInterval(run, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
