// Reads a whole Redis hash in pages (HSCAN): one HGETALL of 100k fields takes ~0.5 s, longer than
// the command timeout that keeps requests from hanging on a sick Redis; pages of 1,000 stay fast.
import type { Redis } from 'ioredis';

export async function scanHash(client: Redis, key: string, call: <T>(run: () => Promise<T>) => Promise<T>): Promise<Array<[string, string]>> {
  const out: Array<[string, string]> = [];
  let cursor = '0';
  do {
    const [next, flat] = await call(() => client.hscan(key, cursor, 'COUNT', 1000));
    for (let i = 0; i < flat.length; i += 2) out.push([flat[i], flat[i + 1]]);
    cursor = next;
  } while (cursor !== '0');
  return out;
}
