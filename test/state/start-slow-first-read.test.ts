// start-slow-first-read: a start on a Redis that is connected but slow for a moment. The start's first
// reads (the domain index, then the projects) had one try each: one that outlived the command timeout
// stopped the start with "state backend unavailable", although the start waits up to 5 s for Redis.
// Here a relay on loopback sits between Portico and a real redis-server and holds Redis's replies on a
// connection for 600 ms (the command timeout is 150 ms) from the moment that connection sends the read
// named, once; everything else passes through as it is.
import t from 'tap';
import { startPortico } from '../helpers/portico.ts';
import { admin, accountWithKey, request } from '../helpers/client.ts';
import { startRedis } from '../helpers/redis.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { startRelay } from '../helpers/tcp-relay.ts';

const HOLD_MS = 600;

interface HoldingRelay {
  url: string;
  /** how many times the replies were held (0 or 1) */
  readonly held: number;
  stop(): Promise<void>;
}

/** A relay to `redisPort` that holds the replies of the first connection whose commands match `read`. */
async function startHoldingRelay(redisPort: number, read: RegExp): Promise<HoldingRelay> {
  let held = 0;
  const relay = await startRelay(() => redisPort, (link) => {
    let holding: Buffer[] | null = null;
    return {
      up(bytes, send) {
        if (held === 0 && read.test(bytes.toString('latin1'))) {
          held++;
          const replies: Buffer[] = (holding = []);
          setTimeout(() => {
            holding = null;
            for (const chunk of replies) link.toClient(chunk);
          }, HOLD_MS);
        }
        send(bytes);
      },
      down: (bytes, send) => (holding ? holding.push(bytes) : send(bytes)),
    };
  });
  return {
    url: `redis://127.0.0.1:${relay.port}`,
    get held() {
      return held;
    },
    stop: () => relay.close(),
  };
}

const redis = await startRedis();
t.teardown(() => redis.stop());
const upstream = await startUpstream();
t.teardown(() => upstream.stop());

// a project and a domain's route in Redis, made by an instance that then stops
const first = await startPortico({ PORTICO_REDIS_URL: redis.url });
const { accountId } = await accountWithKey(first.ports.admin, 'pro');
const made = await admin(first.ports.admin, 'POST', '/admin/projects', { accountId, name: 'slow-start', upstream: upstream.url });
if (made.status !== 201) throw new Error(`project: ${made.status} ${made.text}`);
await first.stop();

for (const [read, what, words] of [
  [/smembers\r\n\$\d+\r\nportico:projects\r\n/i, 'the projects', 'the first read of the projects failed; trying again'],
  [/portico:routes:snapshot\r\n/, 'the domain index', 'the first read of the domain index failed; trying again'],
] as const) {
  t.test(`start-slow-first-read: ${what} read once too late, the start reads again and serves`, async (t) => {
    const relay = await startHoldingRelay(redis.port, read);
    t.teardown(() => relay.stop());
    const portico = await startPortico({ PORTICO_REDIS_URL: relay.url, PORTICO_REDIS_COMMAND_TIMEOUT_MS: '150' });
    t.teardown(() => portico.stop());
    t.equal(relay.held, 1, `Redis's reply to ${what} was held past the command timeout`);
    t.ok(portico.logs.some((line) => line.includes(words)), 'the retry is logged');
    const visit = await request(portico.ports.https, 'slow-start.localhost', portico.ca, { path: '/echo', identity: 'localhost' });
    t.equal(visit.status, 200, `the project made before the start is served (${visit.status})`);
    t.equal((await admin(portico.ports.admin, 'GET', '/readyz', undefined, null)).status, 200, 'ready');
  });
}
