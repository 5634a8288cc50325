// Projects and domains in Redis. A domain's certificate state lives under its own key so the
// certificate manager and owner changes never overwrite each other; `portico:routes` holds the small
// route entry of every served domain, which is all the routing index loads at start.
import type { Redis } from 'ioredis';
import { scanHash } from './redis-scan.ts';
import { routeOf, type Domain, type DomainRoute, type DomainStatus, type DomainStore, type Project, type ProjectStore } from './types.ts';

const HISTORY_SECONDS = 31 * 86_400;

type Call = <T>(run: () => Promise<T>) => Promise<T>;

export function openRedisDomainStores(client: Redis, call: Call): { projects: ProjectStore; domains: DomainStore } {
  // a removed domain must not get its certificate state back from a late writer
  client.defineCommand('porticoSetIfExists', { numberOfKeys: 2, lua: `if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('SET', KEYS[2], ARGV[1]) end return 1` });
  const scripts = client as unknown as { porticoSetIfExists(exists: string, key: string, value: string): Promise<number> };
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
        const claimed = await call(() => client.set(`portico:project-name:${project.name}`, project.id, 'NX'));
        if (claimed === null) return 'name_taken';
        await call(() => client.multi().set(`portico:project:${project.id}`, JSON.stringify(project)).sadd('portico:projects', project.id).exec());
        return null;
      },
      get: (id) => readJson<Project>(`portico:project:${id}`),
      list: async () => {
        const ids = await call(() => client.smembers('portico:projects'));
        if (ids.length === 0) return [];
        const texts = await call(() => client.mget(ids.map((id) => `portico:project:${id}`)));
        return texts.filter((t): t is string => t !== null).map((t) => JSON.parse(t) as Project).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
      },
      update: async (project) => {
        const done = await call(() => client.set(`portico:project:${project.id}`, JSON.stringify(project), 'XX'));
        return done === null ? null : project;
      },
    },
    domains: {
      get: async (hostname) => (await readDomains([hostname]))[0] ?? null,
      listByProject: async (projectId) => {
        const hostnames = await call(() => client.smembers(`portico:project:${projectId}:domains`));
        return (await readDomains(hostnames)).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
      },
      setCertificate: async (hostname, certificate) => {
        await call(() => scripts.porticoSetIfExists(`portico:domain:${hostname}`, `portico:domain-cert:${hostname}`, JSON.stringify(certificate)));
      },
      create: async (domain) => {
        const claimed = await call(() => client.set(`portico:domain:${domain.hostname}`, JSON.stringify(domain), 'NX'));
        if (claimed === null) return 'taken';
        await call(() => client.multi().sadd(`portico:project:${domain.projectId}:domains`, domain.hostname).hset('portico:domain-status', domain.hostname, domain.status).exec());
        return null;
      },
      update: async (domain) => {
        const route = routeOf(domain);
        const results = await call(() => {
          const multi = client.multi().set(`portico:domain:${domain.hostname}`, JSON.stringify(domain), 'XX');
          return (route ? multi.hset('portico:routes', domain.hostname, JSON.stringify(route)) : multi.hdel('portico:routes', domain.hostname))
            .hset('portico:domain-status', domain.hostname, domain.status)
            .exec();
        });
        if (results?.[0]?.[1] === null) {
          // it was removed meanwhile: undo the side entries
          await call(() => client.multi().hdel('portico:routes', domain.hostname).hdel('portico:domain-status', domain.hostname).exec());
          return null;
        }
        return domain;
      },
      remove: async (hostname, at) => {
        const [domain] = await readDomains([hostname]);
        if (!domain) return null;
        await call(() =>
          client
            .multi()
            .set(`portico:domain-history:${hostname}`, JSON.stringify({ accountId: domain.accountId, removedAt: at }), 'EX', HISTORY_SECONDS)
            .del(`portico:domain:${hostname}`, `portico:domain-cert:${hostname}`)
            .srem(`portico:project:${domain.projectId}:domains`, hostname)
            .hdel('portico:routes', hostname)
            .hdel('portico:domain-status', hostname)
            .exec(),
        );
        return domain;
      },
      previousOwner: (hostname) => readJson<{ accountId: string; removedAt: string }>(`portico:domain-history:${hostname}`),
      routes: async () => {
        const all = await scanHash(client, 'portico:routes', call);
        return new Map(all.map(([hostname, text]) => [hostname, JSON.parse(text) as DomainRoute]));
      },
      route: async (hostname) => {
        const text = await call(() => client.hget('portico:routes', hostname));
        return text === null ? null : (JSON.parse(text) as DomainRoute);
      },
      countByStatus: async () => {
        const counts: Record<DomainStatus, number> = { pending: 0, verified: 0, failed: 0 };
        for (const [, status] of await scanHash(client, 'portico:domain-status', call)) counts[status as DomainStatus]++;
        return counts;
      },
    }
  };
}
