// Due times in Redis (schedule.ts), shared by every instance: one sorted set `portico:schedule`,
// member `<kind> <key>`, score the due time (ms). A claim takes what is due and moves it `leaseMs`
// ahead in one script, so each job goes to one instance; an instance that dies mid-job leaves it
// to come up again when the lease ends. Claims and `earliest` read what is due or next (ZRANGEBYSCORE
// … LIMIT, O(log n + k)), never every job.
import type { Redis } from 'ioredis';
import type { ScheduledJob, ScheduleStore } from './schedule.ts';

const KEY = 'portico:schedule';

// KEYS[1] the set; ARGV now, limit, lease end. Returns member, due, member, due, …
const CLAIM = `
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
for i = 1, #due, 2 do redis.call('ZADD', KEYS[1], ARGV[3], due[i]) end
return due`;

// removes the member only while it still has the claim's lease end as its score (nobody set it since)
const FINISH = `
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then redis.call('ZREM', KEYS[1], ARGV[1]) end
return 1`;

type Call = <T>(run: () => Promise<T>) => Promise<T>;

/** `write` runs acknowledged writes (a due time must survive a failover); `call` the rest */
export function openRedisSchedule(client: Redis, call: Call, write: Call = call): ScheduleStore {
  client.defineCommand('porticoClaimJobs', { numberOfKeys: 1, lua: CLAIM });
  client.defineCommand('porticoFinishJob', { numberOfKeys: 1, lua: FINISH });
  const scripts = client as unknown as {
    porticoClaimJobs(key: string, now: number, limit: number, leaseEnd: number): Promise<string[]>;
    porticoFinishJob(key: string, member: string, leaseEnd: number): Promise<number>;
  };
  // lease ends of the jobs this instance claimed, for finish()
  const leases = new Map<string, number>();
  const member = (kind: string, key: string) => {
    if (/\s/.test(kind) || /\s/.test(key) || kind === '' || key === '') throw new Error(`a job kind and key have no spaces: ${JSON.stringify([kind, key])}`);
    return `${kind} ${key}`;
  };

  return {
    async set(kind, key, dueAt) {
      const m = member(kind, key);
      leases.delete(m);
      await write(() => client.zadd(KEY, Math.floor(dueAt), m));
    },
    async setMany(jobs) {
      for (let i = 0; i < jobs.length; i += 1000) {
        const args = jobs.slice(i, i + 1000).flatMap((job) => [Math.floor(job.dueAt), member(job.kind, job.key)]);
        for (let j = 1; j < args.length; j += 2) leases.delete(args[j] as string);
        await write(() => client.zadd(KEY, ...args));
      }
    },
    async cancel(kind, key) {
      const m = member(kind, key);
      leases.delete(m);
      await write(() => client.zrem(KEY, m));
    },
    async claim(now, limit, leaseMs) {
      const leaseEnd = Math.floor(now + leaseMs);
      const flat = await call(() => scripts.porticoClaimJobs(KEY, Math.floor(now), limit, leaseEnd));
      const jobs: ScheduledJob[] = [];
      for (let i = 0; i < flat.length; i += 2) {
        const at = flat[i].indexOf(' ');
        leases.set(flat[i], leaseEnd);
        jobs.push({ kind: flat[i].slice(0, at), key: flat[i].slice(at + 1), dueAt: Number(flat[i + 1]) });
      }
      return jobs;
    },
    async finish(job) {
      const m = member(job.kind, job.key);
      const leaseEnd = leases.get(m);
      leases.delete(m);
      if (leaseEnd !== undefined) await write(() => scripts.porticoFinishJob(KEY, m, leaseEnd));
    },
    async earliest() {
      const first = await call(() => client.zrange(KEY, '0', '0', 'WITHSCORES'));
      return first.length < 2 ? null : Number(first[1]);
    },
    marked: async (name) => (await call(() => client.exists(`${KEY}-done:${name}`))) === 1,
    mark: async (name) => {
      await write(() => client.set(`${KEY}-done:${name}`, new Date().toISOString()));
    },
    close: async () => undefined,
  };
}
