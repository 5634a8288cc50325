// Projects and domains in Redis. A domain's certificate state lives under its own key so the
// certificate manager and owner changes never overwrite each other; `portico:routes` holds the small
// route entry of every served domain, from which the routing index is made (redis-routes.ts);
// `portico:domain-counts` keeps the number of domains per status, so metrics read three fields.
// `portico:domain-events:<hostname>` is the domain's timeline (a list, newest last, trimmed to
// MAX_DOMAIN_EVENTS); an event is pushed by the same script or transaction as the change it describes.
import type { Redis } from 'ioredis';
import { openRedisRouteIndex, SET_ROUTE, SET_ROUTE_KEYS, type RedisRouteIndex } from './redis-routes.ts';
import { eventList, MAX_DOMAIN_EVENTS, oldestFirst, type DomainEvent, type EventsToWrite } from '../domains/events.ts';
import { ownerAfterRemoval, ownerOf, routeOf, type Domain, type DomainRoute, type DomainStatus, type DomainStore, type PreviousOwner, type Project, type ProjectStore } from './types.ts';

const HISTORY_SECONDS = 31 * 86_400;
const STATUS_KEYS = ['portico:domain-status', 'portico:domain-counts'] as const;

// Sets (or with ARGV[2] '' removes) the status of a domain and keeps the counts per status in step.
const SET_STATUS = `
local previous = redis.call('HGET', KEYS[1], ARGV[1])
if previous then redis.call('HINCRBY', KEYS[2], previous, -1) end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
end
return 1`;

// The domain, its route and its status in one step, only while the domain exists (a removal may
// have come first: nothing of it must come back).
const UPDATE_DOMAIN = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
local function setRoute(KEYS, ARGV)${SET_ROUTE}
end
local function setStatus(KEYS, ARGV)${SET_STATUS}
end
setRoute({KEYS[2], KEYS[3], KEYS[4]}, {ARGV[2], ARGV[3]})
setStatus({KEYS[5], KEYS[6]}, {ARGV[2], ARGV[4]})
if #ARGV >= 5 then
  redis.call('RPUSH', KEYS[7], unpack(ARGV, 5))
  redis.call('LTRIM', KEYS[7], -${MAX_DOMAIN_EVENTS}, -1)
end
return 1`;

// Appends ARGV[3…] (events) to the timeline KEYS[3] and sets KEYS[2] to ARGV[2] (or nothing when
// ''), only while the domain KEYS[1] exists and, unless ARGV[1] is '', was created at ARGV[1] (not
// removed and added back since).
const SET_IF_EXISTS = `
local record = redis.call('GET', KEYS[1])
if not record then return 0 end
if ARGV[1] ~= '' and cjson.decode(record).createdAt ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then redis.call('SET', KEYS[2], ARGV[2]) end
if #ARGV >= 3 then
  redis.call('RPUSH', KEYS[3], unpack(ARGV, 3))
  redis.call('LTRIM', KEYS[3], -${MAX_DOMAIN_EVENTS}, -1)
end
return 1`;

// Removes a domain in one step, only while it exists: of removals at the same moment one does it and
// the others find nothing (0), so its timeline gets one `removed` event. KEYS: the domain, its
// certificate state, its history, its timeline, its project's set, the route keys (3), the status keys
// (2); ARGV: hostname, history JSON, history seconds, events…
const REMOVE_DOMAIN = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local function setRoute(KEYS, ARGV)${SET_ROUTE}
end
local function setStatus(KEYS, ARGV)${SET_STATUS}
end
if #ARGV >= 4 then
  redis.call('RPUSH', KEYS[4], unpack(ARGV, 4))
  redis.call('LTRIM', KEYS[4], -${MAX_DOMAIN_EVENTS}, -1)
end
setRoute({KEYS[6], KEYS[7], KEYS[8]}, {ARGV[1], ''})
setStatus({KEYS[9], KEYS[10]}, {ARGV[1], ''})
redis.call('SET', KEYS[3], ARGV[2], 'EX', ARGV[3])
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SREM', KEYS[5], ARGV[1])
-- kept with the history: the same account adding it again continues it
redis.call('EXPIRE', KEYS[4], ARGV[3])
return 1`;

// A domain created in one step, only while its hostname is free (KEYS: the domain, its history, its
// timeline, its project's set, the status keys (2); ARGV: JSON, hostname, account, status, events…):
// a timeline left by the same account continues, another account's is dropped. As a claim (SET NX)
// followed by a transaction, a failure between them left a domain that blocked its hostname (409) but
// was in no project's list and no status count.
const CREATE_DOMAIN = `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 0 end
local earlier = redis.call('GET', KEYS[2])
if earlier and cjson.decode(earlier).accountId == ARGV[3] then
  redis.call('PERSIST', KEYS[3])
else
  redis.call('DEL', KEYS[3])
end
if #ARGV >= 5 then
  redis.call('RPUSH', KEYS[3], unpack(ARGV, 5))
  redis.call('LTRIM', KEYS[3], -${MAX_DOMAIN_EVENTS}, -1)
end
local function setStatus(KEYS, ARGV)${SET_STATUS}
end
setStatus({KEYS[5], KEYS[6]}, {ARGV[2], ARGV[4]})
redis.call('SADD', KEYS[4], ARGV[2])
return 1`;

// A project's name claimed and the project written in one step (KEYS: the name's claim, the project,
// the project set; ARGV: id, JSON): as two, a failure between them (Redis gone, a reshard's -TRYAGAIN)
// left the name claimed by a project that does not exist, and every later create of it answered 409.
const CREATE_PROJECT = `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[1])
return 1`;

const eventsKey = (hostname: string) => `portico:domain-events:${hostname}`;
const eventTexts = (events: EventsToWrite) => eventList(events).map((e) => JSON.stringify(e));

type Call = <T>(run: () => Promise<T>) => Promise<T>;

// `write` runs an acknowledged write: it waits for replicas after it (redis-connect.ts)
export function openRedisDomainStores(client: Redis, call: Call, write: Call = call): { projects: ProjectStore; domains: DomainStore; routeIndex: RedisRouteIndex } {
  // a removed domain must not get its certificate state back from a late writer
  client.defineCommand('porticoSetIfExists', { numberOfKeys: 3, lua: SET_IF_EXISTS });
  client.defineCommand('porticoUpdateDomain', { numberOfKeys: 7, lua: UPDATE_DOMAIN });
  client.defineCommand('porticoRemoveDomain', { numberOfKeys: 10, lua: REMOVE_DOMAIN });
  client.defineCommand('porticoCreateProject', { numberOfKeys: 3, lua: CREATE_PROJECT });
  client.defineCommand('porticoCreateDomain', { numberOfKeys: 6, lua: CREATE_DOMAIN });
  const scripts = client as unknown as {
    porticoCreateProject(name: string, project: string, projects: string, id: string, json: string): Promise<number>;
    porticoCreateDomain(...args: string[]): Promise<number>;
    porticoSetIfExists(exists: string, key: string, events: string, createdAt: string, value: string, ...event: string[]): Promise<number>;
    porticoUpdateDomain(...args: Array<string>): Promise<number>;
    porticoRemoveDomain(...args: Array<string>): Promise<number>;
  };
  const routeIndex = openRedisRouteIndex(client, call);
  const readJson = async <T>(key: string): Promise<T | null> => {
    const text = await call(() => client.get(key));
    return text === null ? null : (JSON.parse(text) as T);
  };
  /** domains with their certificate state, which lives under its own key */
  const readDomains = async (hostnames: string[]): Promise<Domain[]> => {
    if (hostnames.length === 0) return [];
    const texts = await call(() => client.mget(hostnames.flatMap((h) => [`portico:domain:${h}`, `portico:domain-cert:${h}`])));
    const out: Domain[] = [];
    for (let i = 0; i < texts.length; i += 2) {
      if (texts[i] === null) continue;
      const domain = JSON.parse(texts[i]!) as Domain;
      domain.certificate = texts[i + 1] ? JSON.parse(texts[i + 1]!) : { status: 'none' };
      out.push(domain);
    }
    return out;
  };

  return {
    projects: {
      create: async (project) => {
        const made = await write(() => scripts.porticoCreateProject(`portico:project-name:${project.name}`, `portico:project:${project.id}`, 'portico:projects', project.id, JSON.stringify(project)));
        return made === 0 ? 'name_taken' : null;
      },
      get: (id) => readJson<Project>(`portico:project:${id}`),
      list: async () => {
        const ids = await call(() => client.smembers('portico:projects'));
        if (ids.length === 0) return [];
        const texts = await call(() => client.mget(ids.map((id) => `portico:project:${id}`)));
        return texts.filter((t): t is string => t !== null).map((t) => JSON.parse(t) as Project).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
      },
      update: async (project) => {
        const done = await write(() => client.set(`portico:project:${project.id}`, JSON.stringify(project), 'XX'));
        return done === null ? null : project;
      },
    },
    domains: {
      get: async (hostname) => (await readDomains([hostname]))[0] ?? null,
      listByProject: async (projectId) => {
        const hostnames = await call(() => client.smembers(`portico:project:${projectId}:domains`));
        return (await readDomains(hostnames)).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
      },
      statusesByProject: async (projectId) => {
        const hostnames = await call(() => client.smembers(`portico:project:${projectId}:domains`));
        if (hostnames.length === 0) return [];
        const statuses = await call(() => client.hmget(STATUS_KEYS[0], ...hostnames));
        // a hostname whose status is gone was removed between the two reads
        return hostnames.flatMap((hostname, i) => (statuses[i] ? [{ hostname, status: statuses[i] as DomainStatus }] : []));
      },
      setCertificate: async (hostname, certificate, event, of) => {
        await write(() => scripts.porticoSetIfExists(`portico:domain:${hostname}`, `portico:domain-cert:${hostname}`, eventsKey(hostname), of ?? '', JSON.stringify(certificate), ...eventTexts(event)));
      },
      appendEvent: async (hostname, event, of) => {
        await write(() => scripts.porticoSetIfExists(`portico:domain:${hostname}`, `portico:domain-cert:${hostname}`, eventsKey(hostname), of ?? '', '', JSON.stringify(event)));
      },
      events: async (hostname) => {
        const texts = await call(() => client.lrange(eventsKey(hostname), 0, -1));
        // a removed domain's timeline waits for a re-add by the same account: not shown meanwhile
        if (texts.length === 0 || (await call(() => client.exists(`portico:domain:${hostname}`))) === 0) return [];
        return oldestFirst(texts.map((t) => JSON.parse(t) as DomainEvent));
      },
      create: async (domain, event) => {
        const { hostname } = domain;
        const made = await write(() =>
          scripts.porticoCreateDomain(`portico:domain:${hostname}`, `portico:domain-history:${hostname}`, eventsKey(hostname), `portico:project:${domain.projectId}:domains`, ...STATUS_KEYS, JSON.stringify(domain), hostname, domain.accountId, domain.status, ...eventTexts(event)),
        );
        return made === 0 ? 'taken' : null;
      },
      update: async (domain, event) => {
        const route = routeOf(domain);
        const done = await write(() =>
          scripts.porticoUpdateDomain(`portico:domain:${domain.hostname}`, ...SET_ROUTE_KEYS, ...STATUS_KEYS, eventsKey(domain.hostname), JSON.stringify(domain), domain.hostname, route ? JSON.stringify(route) : '', domain.status, ...eventTexts(event)),
        );
        if (done === 0) return null;
        routeIndex.applyLocal(domain.hostname, route);
        return domain;
      },
      remove: async (hostname, at, event) => {
        const [domain] = await readDomains([hostname]);
        if (!domain) return null;
        const earlier = await readJson<PreviousOwner & { owner?: PreviousOwner | null }>(`portico:domain-history:${hostname}`);
        const owner = ownerAfterRemoval(domain, at, earlier ? ownerOf(earlier) : null);
        const done = await write(() =>
          scripts.porticoRemoveDomain(
            `portico:domain:${hostname}`,
            `portico:domain-cert:${hostname}`,
            `portico:domain-history:${hostname}`,
            eventsKey(hostname),
            `portico:project:${domain.projectId}:domains`,
            ...SET_ROUTE_KEYS,
            ...STATUS_KEYS,
            hostname,
            JSON.stringify({ accountId: domain.accountId, removedAt: at, owner }),
            String(HISTORY_SECONDS),
            ...eventTexts(event),
          ),
        );
        if (done === 0) return null;
        routeIndex.applyLocal(hostname, null);
        return domain;
      },
      previousOwner: async (hostname) => {
        const earlier = await readJson<PreviousOwner & { owner?: PreviousOwner | null }>(`portico:domain-history:${hostname}`);
        return earlier ? ownerOf(earlier) : null;
      },
      route: async (hostname) => {
        const text = await call(() => client.hget('portico:routes', hostname));
        return text === null ? null : (JSON.parse(text) as DomainRoute);
      },
      indexedRoute: (hostname) => routeIndex.route(hostname),
      countByStatus: async () => {
        const stored = await call(() => client.hmget(STATUS_KEYS[1], 'pending', 'verified', 'failed'));
        const [pending, verified, failed] = stored.map((n) => Math.max(0, Number(n ?? 0)));
        return { pending, verified, failed } satisfies Record<DomainStatus, number>;
      },
    },
    routeIndex,
  };
}
