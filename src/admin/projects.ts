// Admin calls for projects (DESIGN §5): a project has a name (its default hostname's label) and an
// upstream (its deploy).
import type { Config } from '../config.ts';
import { HttpError } from '../errors.ts';
import type { Project, Stores } from '../state/types.ts';
import { domainView } from '../domains/registry.ts';
import { newId, onlyKeys } from './accounts.ts';
import { quoted, shown } from './input.ts';

// labels that would read as the platform's own services
const RESERVED = new Set(['www', 'api', 'admin', 'edge', 'staging', 'app', 'dashboard', 'status', 'mail', 'portico', 'acme', 'static', 'cdn', 'ns1', 'ns2']);

export function projectView(project: Project, config: Config) {
  return { id: project.id, accountId: project.accountId, name: project.name, upstream: project.upstream, defaultDomain: `${project.name}.${config.platform.domain}`, createdAt: project.createdAt };
}

export async function createProject(body: Record<string, unknown>, stores: Stores, config: Config) {
  onlyKeys(body, ['accountId', 'name', 'upstream']);
  if (typeof body.accountId !== 'string' || body.accountId === '') throw new HttpError('invalid_request', '"accountId" is required.');
  const name = parseName(body.name, config);
  const upstream = body.upstream === undefined || body.upstream === null ? null : parseUpstream(body.upstream);
  const account = await stores.accounts.get(body.accountId);
  if (!account) throw new HttpError('not_found', `No account ${body.accountId}.`);
  const project: Project = { id: newId('prj'), accountId: account.id, name, upstream, createdAt: new Date().toISOString() };
  if ((await stores.projects.create(project)) === 'name_taken') throw await nameTaken(name, account.id, stores);
  await stores.events.publish(`project:${project.id}`);
  return projectView(project, config);
}

/**
 * The 409 for a name in use. When the project is this account's own, it says so and names it: most
 * often the retry of a create answered 503 whose write was applied all the same (Redis frozen, or a
 * failover, after the write reached it). Another account's project is not named.
 */
async function nameTaken(name: string, accountId: string, stores: Stores): Promise<HttpError> {
  const own = (await stores.projects.list().catch(() => [])).find((p) => p.name === name && p.accountId === accountId);
  return new HttpError('conflict', own
    ? `This account has a project named ${name} already: ${own.id}, created ${own.createdAt}.`
    : `A project named ${name} exists already; names are unique because they are hostnames.`);
}

export async function getProject(id: string, stores: Stores): Promise<Project> {
  const project = await stores.projects.get(id);
  if (!project) throw new HttpError('not_found', `No project ${shown(id)}.`);
  return project;
}

export async function projectDetail(project: Project, stores: Stores, config: Config) {
  const domains = await stores.domains.listByProject(project.id);
  return {
    ...projectView(project, config),
    domains: domains.map(domainView),
    redirects: domains.filter((d) => d.redirect).map((d) => ({ from: d.hostname, to: d.redirect!.to, status: d.redirect!.status })),
  };
}

export async function updateProject(id: string, body: Record<string, unknown>, stores: Stores, config: Config) {
  onlyKeys(body, ['upstream']);
  if (!('upstream' in body)) throw new HttpError('invalid_request', '"upstream" is required.');
  const project = await getProject(id, stores);
  const next = { ...project, upstream: body.upstream === null ? null : parseUpstream(body.upstream) };
  if (!(await stores.projects.update(next))) throw new HttpError('not_found', `No project ${shown(id)}.`);
  await stores.events.publish(`project:${id}`);
  return projectView(next, config);
}

function parseName(value: unknown, config: Config): string {
  if (typeof value !== 'string') throw new HttpError('invalid_request', '"name" is required: a DNS label such as "shop".');
  const name = value.trim().toLowerCase();
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(name)) {
    throw new HttpError('invalid_request', `"name" must be a DNS label: 1–63 of a–z, 0–9 and "-", not starting or ending with "-" (it becomes ${name ? shown(name, 70) : '<name>'}.${config.platform.domain}).`);
  }
  if (RESERVED.has(name) || [...config.api.hosts, ...config.api.stagingHosts, config.platform.cnameTarget].includes(`${name}.${config.platform.domain}`)) {
    throw new HttpError('invalid_request', `"${name}" is reserved; choose another name.`);
  }
  return name;
}

function parseUpstream(value: unknown): string {
  if (typeof value !== 'string') throw new HttpError('invalid_request', '"upstream" must be an http:// or https:// URL.');
  // `localhost:3000` parses as the scheme "localhost:", `127.0.0.1:3000` as nothing at all
  const hint = /^(\[[0-9a-f:.]+\]|[^\s/:[\]@]+):[0-9]+(\/\S*)?$/i.test(value) ? ` Did you mean "http://${value}"?` : '';
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new HttpError('invalid_request', `"upstream" is not a URL: ${quoted(value)}.${hint}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new HttpError('invalid_request', `"upstream" must be an http:// or https:// URL, got ${quoted(value)}.${hint}`);
  if (url.username || url.password || url.search || url.hash) throw new HttpError('invalid_request', '"upstream" must not carry credentials, a query or a fragment.');
  if (url.port === '0') throw new HttpError('invalid_request', '"upstream" names port 0, which nothing listens on; give the port of the deploy (1-65535).');
  return url.toString().replace(/\/$/, '');
}
