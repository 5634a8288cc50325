#!/usr/bin/env -S node --max-semi-space-size=8 --heap-growing-percent=20
// `portico` — runs the server (`serve`) and is a client of the admin API for everything else.
// The compile cache comes first, before any module worth caching is compiled; the server's own
// modules load through import() in `serve`, so admin commands start without them.
import './compile-cache.ts';
import { parseArgs } from 'node:util';
import { adminRequest, AdminError } from './admin-client.ts';
import { DOMAIN_COMMANDS } from './domain-commands.ts';

interface Command {
  usage: string;
  summary: string;
  options: Record<string, { type: 'string' | 'boolean'; help: string }>;
  positionals: string[];
  run(values: Record<string, string | boolean | undefined>, positionals: string[]): Promise<void>;
}

const json = { type: 'boolean' as const, help: 'print the raw JSON answer' };

const COMMANDS: Record<string, Command> = {
  serve: {
    usage: 'portico serve [--workers N]',
    summary: 'Run Portico with config/portico.yaml (or PORTICO_CONFIG) and the PORTICO_* variables. With Redis, N workers share the ports (default: one per core); embedded state always runs one.',
    options: { workers: { type: 'string', help: 'worker processes (with PORTICO_REDIS_URL)' } },
    positionals: [],
    run: async (v) => {
      const workers = v.workers === undefined ? undefined : Number(v.workers);
      if (workers !== undefined && (!Number.isInteger(workers) || workers < 1 || workers > 256)) throw new AdminError('--workers must be a whole number from 1 to 256');
      const { runServer } = await import('./serve.ts');
      await runServer(workers);
    },
  },
  'accounts create': {
    usage: 'portico accounts create --plan free|pro|business|enterprise [--per-minute N --per-day N]',
    summary: 'Create an account. Enterprise accounts need --per-minute and --per-day.',
    options: { plan: { type: 'string', help: 'free, pro, business or enterprise' }, 'per-minute': { type: 'string', help: 'enterprise limit per minute' }, 'per-day': { type: 'string', help: 'enterprise limit per day' }, json },
    positionals: [],
    run: async (v) => {
      const account = await adminRequest('POST', '/admin/accounts', { plan: v.plan, ...limitsOf(v) });
      print(v, account, `account ${account.id} (${account.plan}: ${account.limits.perMinute}/min, ${account.limits.perDay}/day)`);
    },
  },
  'accounts set': {
    usage: 'portico accounts set ACCOUNT_ID [--plan P] [--per-minute N --per-day N]',
    summary: 'Change an account\'s plan or enterprise limits; applies at once, counts are kept.',
    options: { plan: { type: 'string', help: 'free, pro, business or enterprise' }, 'per-minute': { type: 'string', help: 'enterprise limit per minute' }, 'per-day': { type: 'string', help: 'enterprise limit per day' }, json },
    positionals: ['ACCOUNT_ID'],
    run: async (v, [id]) => {
      const account = await adminRequest('PATCH', `/admin/accounts/${encodeURIComponent(id)}`, { plan: v.plan, ...limitsOf(v) });
      print(v, account, `account ${account.id} (${account.plan}: ${account.limits.perMinute}/min, ${account.limits.perDay}/day)`);
    },
  },
  'keys create': {
    usage: 'portico keys create --account ACCOUNT_ID [--environment production|staging]',
    summary: 'Create an API key. The key is printed once and cannot be shown again.',
    options: { account: { type: 'string', help: 'the account the key belongs to' }, environment: { type: 'string', help: 'production (default) or staging' }, json },
    positionals: [],
    run: async (v) => {
      const key = await adminRequest('POST', '/admin/keys', { accountId: v.account, environment: v.environment });
      print(v, key, `key ${key.id} for ${key.accountId} (${key.environment}):\n\n  ${key.key}\n\nStore it now: it is shown only once.`);
    },
  },
  'keys revoke': {
    usage: 'portico keys revoke KEY_ID',
    summary: 'Revoke a key; it stops working on every instance at once.',
    options: {},
    positionals: ['KEY_ID'],
    run: async (_v, [id]) => {
      await adminRequest('DELETE', `/admin/keys/${encodeURIComponent(id)}`);
      console.log(`key ${id} revoked`);
    },
  },
  'projects create': {
    usage: 'portico projects create --account ACCOUNT_ID --name NAME [--upstream URL]',
    summary: 'Create a project; it answers at once on <name>.<platform domain>.',
    options: { account: { type: 'string', help: 'the owning account' }, name: { type: 'string', help: 'a DNS label' }, upstream: { type: 'string', help: 'http(s) URL of the deploy' }, json },
    positionals: [],
    run: async (v) => {
      const project = await adminRequest('POST', '/admin/projects', { accountId: v.account, name: v.name, upstream: v.upstream });
      print(v, project, `project ${project.id} "${project.name}" → ${project.upstream ?? '(no deploy yet)'}\nserved at https://${project.defaultDomain}`);
    },
  },
  'domains add': {
    usage: 'portico domains add PROJECT_ID HOSTNAME',
    summary: 'Add a custom domain to a project and show the DNS records to create.',
    options: { json },
    positionals: ['PROJECT_ID', 'HOSTNAME'],
    run: async (v, [project, hostname]) => {
      const domain = await adminRequest('POST', `/admin/projects/${encodeURIComponent(project)}/domains`, { hostname });
      print(v, domain, `${domain.hostname} added (${domain.status}). Create these DNS records at your DNS provider:\n\n${recordsTable(domain.records)}\n\nPortico checks them by itself (next check ${domain.nextCheckAt ?? 'soon'}) and orders the certificate once they appear.\nTo check now: portico domains verify ${project} ${domain.hostname}; to follow along: portico domains events ${project} ${domain.hostname}`);
    },
  },
  'domains verify': {
    usage: 'portico domains verify PROJECT_ID HOSTNAME',
    summary: 'Check the DNS records now and explain what is missing.',
    options: { json },
    positionals: ['PROJECT_ID', 'HOSTNAME'],
    run: async (v, [project, hostname]) => printVerification(v, await adminRequest('POST', `/admin/projects/${encodeURIComponent(project)}/domains/${encodeURIComponent(hostname)}/verify`)),
  },
  'domains reverify': {
    usage: 'portico domains reverify PROJECT_ID HOSTNAME',
    summary: 'Check DNS and CAA again, reset the certificate backoff and try again at once.',
    options: { json },
    positionals: ['PROJECT_ID', 'HOSTNAME'],
    run: async (v, [project, hostname]) => printVerification(v, await adminRequest('POST', `/admin/projects/${encodeURIComponent(project)}/domains/${encodeURIComponent(hostname)}/reverify`)),
  },
  'domains remove': {
    usage: 'portico domains remove PROJECT_ID HOSTNAME',
    summary: 'Remove a domain: traffic on it stops at once, on every instance.',
    options: {},
    positionals: ['PROJECT_ID', 'HOSTNAME'],
    run: async (_v, [project, hostname]) => {
      await adminRequest('DELETE', `/admin/projects/${encodeURIComponent(project)}/domains/${encodeURIComponent(hostname)}`);
      console.log(`${hostname} removed; it is no longer served`);
    },
  },
  ...DOMAIN_COMMANDS,
  'redirects add': {
    usage: 'portico redirects add PROJECT_ID --from HOSTNAME --to HOSTNAME [--status 301|302|307|308]',
    summary: 'Make a domain of the project redirect to another hostname (same path and query).',
    options: { from: { type: 'string', help: 'a domain of this project' }, to: { type: 'string', help: 'the hostname to send visitors to' }, status: { type: 'string', help: '301 (default), 302, 307 or 308' }, json },
    positionals: ['PROJECT_ID'],
    run: async (v, [project]) => {
      const redirect = await adminRequest('POST', `/admin/projects/${encodeURIComponent(project)}/redirects`, { from: v.from, to: v.to, status: v.status === undefined ? undefined : Number(v.status) });
      print(v, redirect, `${redirect.from} → https://${redirect.to} (${redirect.status})`);
    },
  },
};

function recordsTable(records: Array<{ type: string; name: string; value: string; ttl: number; note?: string }>): string {
  const rows = records.map((r) => [r.type, r.name, r.value, String(r.ttl)]);
  const widths = [0, 1, 2, 3].map((i) => Math.max(...[['TYPE', 'NAME', 'VALUE', 'TTL'][i], ...rows.map((r) => r[i])].map((s) => s.length)));
  const line = (cells: string[]) => `  ${cells.map((c, i) => c.padEnd(widths[i])).join('  ')}`;
  const notes = records.filter((r) => r.note).map((r) => `  note: ${r.note}`);
  return [line(['TYPE', 'NAME', 'VALUE', 'TTL']), ...rows.map(line), ...notes].join('\n');
}

function printVerification(v: Record<string, unknown>, domain: { hostname: string; status: string; diagnostics: Array<{ code: string; message: string }> }): void {
  const findings = domain.diagnostics.map((d) => `  - [${d.code}] ${d.message}`).join('\n');
  print(v, domain, `${domain.hostname}: ${domain.status}${findings ? `\n${findings}` : ''}`);
}

function limitsOf(v: Record<string, string | boolean | undefined>) {
  if (v['per-minute'] === undefined && v['per-day'] === undefined) return {};
  return { limits: { perMinute: toNumber(v['per-minute']), perDay: toNumber(v['per-day']) } };
}

function toNumber(value: string | boolean | undefined): number | undefined {
  return typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : undefined;
}

function print(v: Record<string, unknown>, body: Record<string, unknown>, text: string): void {
  console.log(v.json ? JSON.stringify(body, null, 2) : text);
}

function help(): string {
  const lines = Object.values(COMMANDS).map((c) => `  ${c.usage}\n      ${c.summary}`);
  return `Usage: portico <command> [options]\n\nCommands:\n${lines.join('\n')}\n
The admin commands talk to PORTICO_ADMIN_URL (default http://127.0.0.1:9180) with PORTICO_ADMIN_TOKEN
(default: the token saved in the data dir on first start). "portico <command> --help" for details.`;
}

function commandHelp(c: Command): string {
  const options = Object.entries(c.options).map(([name, o]) => `  --${name}${o.type === 'string' ? ' VALUE' : ''}    ${o.help}`);
  return `Usage: ${c.usage}\n\n${c.summary}${options.length ? `\n\nOptions:\n${options.join('\n')}` : ''}`;
}

async function main(argv: string[]): Promise<number> {
  const name = [argv.slice(0, 2).join(' '), argv[0]].find((n) => n in COMMANDS);
  if (!name) {
    const wantsHelp = argv.length === 0 || argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help';
    (wantsHelp ? console.log : console.error)(wantsHelp ? help() : `portico: unknown command "${argv.join(' ')}"\n\n${help()}`);
    return wantsHelp ? 0 : 2;
  }
  const command = COMMANDS[name];
  const rest = argv.slice(name.split(' ').length);
  if (rest.includes('--help') || rest.includes('-h')) {
    console.log(commandHelp(command));
    return 0;
  }
  let parsed;
  try {
    parsed = parseArgs({ args: rest, options: Object.fromEntries(Object.entries(command.options).map(([k, o]) => [k, { type: o.type }])), allowPositionals: true, strict: true });
  } catch (err) {
    console.error(`portico ${name}: ${(err as Error).message}\n\n${commandHelp(command)}`);
    return 2;
  }
  if (parsed.positionals.length !== command.positionals.length) {
    console.error(`portico ${name}: expected ${command.positionals.join(' ') || 'no arguments'}\n\n${commandHelp(command)}`);
    return 2;
  }
  try {
    await command.run(parsed.values as Record<string, string | boolean | undefined>, parsed.positionals);
    return name === 'serve' ? -1 : 0;
  } catch (err) {
    if (err instanceof AdminError) {
      console.error(`portico ${name}: ${err.message}`);
      return 1;
    }
    throw err;
  }
}

main(process.argv.slice(2)).then((code) => {
  if (code >= 0) process.exitCode = code;
});
