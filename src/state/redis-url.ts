// PORTICO_REDIS_URL's forms (DESIGN §8). ioredis reads `redis://` itself, but the Sentinel and
// Cluster forms list several servers in the authority (`h:p,h:p`), which WHATWG URL parsing refuses,
// so every form is taken apart here. User and password are kept out of every message.
//
// Sentinels that require a password of their own (`requirepass` in sentinel.conf) are given it in the
// Sentinel forms' query: `?sentinel_password=…[&sentinel_username=…]`, the spelling other Sentinel URL
// parsers use (redis-py's Redis-Sentinel-Url, prefect-redis), percent-encoded as in the user part (a `+`
// stays a `+`). The URL's own user and password are the Redis servers'; sentinels without a query are
// reached without credentials.

export type RedisMode = 'standalone' | 'sentinel' | 'cluster';

export interface RedisAddress {
  host: string;
  port: number;
}

export interface RedisTarget {
  mode: RedisMode;
  tls: boolean;
  /** standalone: one; sentinel: the sentinels; cluster: the seed nodes */
  addresses: RedisAddress[];
  /** sentinel: the monitored primary's name */
  name?: string;
  db: number;
  username?: string;
  password?: string;
  /** sentinel: credentials for the sentinels themselves (the query's sentinel_username, sentinel_password) */
  sentinelUsername?: string;
  sentinelPassword?: string;
}

export const ACCEPTED_FORMS =
  'redis://[user:password@]host:port[/db], rediss://…, redis+sentinel://[user:password@]host:port[,host:port…]/<primary name>[/db][?sentinel_password=…[&sentinel_username=…]], rediss+sentinel://…, redis+cluster://[user:password@]host:port[,host:port…] or rediss+cluster://…';

const SCHEMES: Record<string, { mode: RedisMode; tls: boolean }> = {
  redis: { mode: 'standalone', tls: false },
  rediss: { mode: 'standalone', tls: true },
  'redis+sentinel': { mode: 'sentinel', tls: false },
  'rediss+sentinel': { mode: 'sentinel', tls: true },
  'redis+cluster': { mode: 'cluster', tls: false },
  'rediss+cluster': { mode: 'cluster', tls: true },
};

const SENTINEL_QUERY = new Set(['sentinel_username', 'sentinel_password']);

const DEFAULT_PORT: Record<RedisMode, number> = { standalone: 6379, sentinel: 26379, cluster: 6379 };

/** The target, or an Error whose message names what is wrong and never the credentials. */
export function parseRedisUrl(text: string): RedisTarget | Error {
  const match = /^([a-z+]+):\/\/(?:([^@/]*)@)?([^/?#]*)(\/[^?#]*)?(?:\?([^#]*))?$/i.exec(text.trim());
  const scheme = match && SCHEMES[match[1].toLowerCase()];
  if (!match || !scheme) return new Error(`must be one of ${ACCEPTED_FORMS}; got ${JSON.stringify(redact(text))}`);
  const [, , userinfo, authority, pathname = '', query] = match;
  const fail = (what: string) => new Error(`${what} (accepted: ${ACCEPTED_FORMS}); got ${JSON.stringify(redact(text))}`);
  // a piece of the URL is quoted only when the redacted URL shows it anyway: with an unencoded `@` in
  // the password, what the pattern took for the host or the path may be the password's tail
  const quoted = (lead: string, piece: string) => (redact(text).includes(piece) ? `${lead} ${JSON.stringify(piece)}` : '');

  const addresses: RedisAddress[] = [];
  for (const part of authority.split(',')) {
    const address = parseAddress(part, DEFAULT_PORT[scheme.mode]);
    const hint = part.includes('@')
      ? ': an @ in the user or password is written %40'
      : /^(?:\[[^\]]*\]|[^:[]*):(?!\d*$)/.test(part) ? ': a port is a number, and a user and password end with an @' : '';
    if (!address) return fail(`has no valid host:port${quoted(' in', part)}${hint}`);
    addresses.push(address);
  }
  if (scheme.mode === 'standalone' && addresses.length !== 1) return fail('names one server (several: use redis+sentinel:// or redis+cluster://)');

  const segments = pathname.split('/').filter((s) => s !== '');
  let name: string | undefined;
  let dbText: string | undefined;
  if (scheme.mode === 'sentinel') {
    if (segments.length < 1 || segments.length > 2) return fail('must name the primary: redis+sentinel://host:port,…/<primary name>[/db]');
    [name, dbText] = [decodeURIComponent(segments[0]), segments[1]];
  } else if (scheme.mode === 'cluster') {
    // Redis Cluster has only database 0
    if (segments.length > 0) return fail('takes no path: a cluster has only database 0');
  } else {
    if (segments.length > 1) return fail('takes at most a database number as its path');
    dbText = segments[0];
  }
  const db = dbText === undefined ? 0 : Number(dbText);
  if (!Number.isInteger(db) || db < 0 || !/^\d+$/.test(dbText ?? '0')) return fail(`has a database that is not a number${quoted(':', dbText ?? '')}`);

  let username: string | undefined;
  let password: string | undefined;
  if (userinfo !== undefined && userinfo !== '') {
    const at = userinfo.indexOf(':');
    try {
      username = decodeURIComponent(at === -1 ? userinfo : userinfo.slice(0, at)) || undefined;
      password = at === -1 ? undefined : decodeURIComponent(userinfo.slice(at + 1)) || undefined;
    } catch {
      return fail('has a user or password that is not valid percent-encoding');
    }
  }
  const sentinel: Record<string, string> = {};
  if (query !== undefined) {
    if (scheme.mode !== 'sentinel') return fail('takes no query: only the Sentinel forms take ?sentinel_password=…');
    for (const pair of query.split('&')) {
      const eq = pair.indexOf('=');
      const key = eq === -1 ? pair : pair.slice(0, eq);
      // not echoed: a misplaced password may be what it is
      if (!SENTINEL_QUERY.has(key)) return fail('has a query parameter other than sentinel_username and sentinel_password');
      if (Object.hasOwn(sentinel, key)) return fail(`names ${key} twice`);
      try {
        sentinel[key] = decodeURIComponent(eq === -1 ? '' : pair.slice(eq + 1));
      } catch {
        return fail(`has a ${key} that is not valid percent-encoding`);
      }
    }
  }
  return {
    mode: scheme.mode, tls: scheme.tls, addresses, name, db, username, password,
    ...(scheme.mode === 'sentinel' && { sentinelUsername: sentinel.sentinel_username || undefined, sentinelPassword: sentinel.sentinel_password || undefined }),
  };
}

function parseAddress(text: string, defaultPort: number): RedisAddress | null {
  const m = /^(\[[0-9a-f:.]+\]|[a-z0-9._-]+)(?::(\d{1,5}))?$/i.exec(text);
  if (!m) return null;
  const port = m[2] === undefined ? defaultPort : Number(m[2]);
  if (port < 1 || port > 65535) return null;
  return { host: m[1].startsWith('[') ? m[1].slice(1, -1) : m[1], port };
}

/**
 * The URL with user and password replaced, for logs and messages; every query value too (the
 * sentinels' credentials, and whatever a misspelt parameter carries: a parameter without `=` whole).
 * Everything up to the last `@` is hidden, also in text that is no URL at all (`redis//:pw@h`,
 * `:pw@h`): a password with an unencoded `@`, `/` or `#` ends only there. When a `?` comes before that
 * `@`, the `@` may be a query value's (`?sentinel_password=a@b`), and what follows it that value's
 * tail: everything after the scheme is hidden. What follows a `#` after the last `@` is hidden whole
 * (a `#` in a query value starts a fragment: `?sentinel_password=a#b`). A `scheme://` is kept.
 */
export function redact(text: string): string {
  const at = text.lastIndexOf('@');
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(text)?.[0] ?? '';
  if (at !== -1 && text.slice(scheme.length, at).includes('?')) return `${scheme}***`;
  return hidePorts(at === -1 ? text : `${scheme}***${text.slice(at)}`, at === -1 ? scheme.length : scheme.length + 4)
    .replace(/#.*$/s, '#***')
    .replace(/([?&])([^=&#]*)(=?)[^&#]*/g, (_all, separator: string, key: string, eq: string) => (eq ? `${separator}${key}=***` : `${separator}***`));
}

/**
 * `user:password` with its `@` forgotten (`redis://:pw`, `redis://u:pw`) reads as host:port: a port that
 * is not a number is hidden, from `from` (where the hosts begin) to the path, query or fragment
 */
function hidePorts(text: string, from: number): string {
  const end = text.slice(from).search(/[/?#]/);
  const hosts = end === -1 ? text.slice(from) : text.slice(from, from + end);
  const shown = hosts.split(',').map((part) => {
    const colon = part.startsWith('[') ? part.indexOf(':', part.indexOf(']')) : part.indexOf(':');
    return colon === -1 || /^\d{0,5}$/.test(part.slice(colon + 1)) ? part : `${part.slice(0, colon)}:***`;
  });
  return text.slice(0, from) + shown.join(',') + text.slice(from + hosts.length);
}
