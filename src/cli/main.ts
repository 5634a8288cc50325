#!/usr/bin/env -S node --max-semi-space-size=8 --heap-growing-percent=20
// `portico` — runs the server (`serve`) and is a client of the admin API for everything else.
// The compile cache comes first, before any module worth caching is compiled; the server's own
// modules load through import() in `serve`, so admin commands start without them.
import './compile-cache.ts';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { adminRequest, AdminError, httpsUrl, publicHttpsPort } from './admin-client.ts';
import { ConfigError } from '../config.ts';
import { DOMAIN_COMMANDS } from './domain-commands.ts';
import { checkOptions, json, UsageError, type Command, type Option, type Values } from './options.ts';

const count = { min: 1, max: Number.MAX_SAFE_INTEGER };
const plan = (required: boolean): Option => ({ type: 'string', help: 'free, pro, business or enterprise', required });
const limits: Record<string, Option> = {
  'per-minute': { type: 'string', help: 'enterprise limit per minute', integer: count },
  'per-day': { type: 'string', help: 'enterprise limit per day', integer: count },
};

const COMMANDS: Record<string, Command> = {
  serve: {
    usage: 'portico serve [--workers N]',
    summary: 'Run Portico with config/portico.yaml (or PORTICO_CONFIG) and the PORTICO_* variables. With Redis, N workers share the ports (default: one per core); embedded state always runs one.',
    options: { workers: { type: 'string', help: 'worker processes, 1 to 256 (with PORTICO_REDIS_URL)', integer: { min: 1, max: 256 } } },
    positionals: [],
    run: async (v) => {
      const { runServer } = await import('./serve.ts');
      await runServer(v.workers as number | undefined);
    },
  },
  'accounts create': {
    usage: 'portico accounts create --plan free|pro|business|enterprise [--per-minute N --per-day N]',
    summary: 'Create an account. Enterprise accounts need --per-minute and --per-day.',
    options: { plan: plan(true), ...limits, json },
    positionals: [],
    run: async (v) => {
      const account = await adminRequest('POST', '/admin/accounts', { plan: v.plan, ...limitsOf(v) });
      print(v, account, `account ${account.id} (${account.plan}: ${account.limits.perMinute}/min, ${account.limits.perDay}/day)`);
    },
  },
  'accounts set': {
    usage: 'portico accounts set ACCOUNT_ID [--plan P] [--per-minute N --per-day N]',
    summary: 'Change an account\'s plan or enterprise limits; applies at once, counts are kept.',
    options: { plan: plan(false), ...limits, json },
    positionals: ['ACCOUNT_ID'],
    run: async (v, [id]) => {
      if (v.plan === undefined && v['per-minute'] === undefined && v['per-day'] === undefined) throw new UsageError('nothing to change: give --plan, or --per-minute and --per-day');
      const account = await adminRequest('PATCH', `/admin/accounts/${encodeURIComponent(id)}`, { plan: v.plan, ...limitsOf(v) });
      print(v, account, `account ${account.id} (${account.plan}: ${account.limits.perMinute}/min, ${account.limits.perDay}/day)`);
    },
  },
  'keys create': {
    usage: 'portico keys create --account ACCOUNT_ID [--environment production|staging]',
    summary: 'Create an API key. The key is printed once and cannot be shown again.',
    options: { account: { type: 'string', help: 'the account the key belongs to', required: true }, environment: { type: 'string', help: 'production (default) or staging' }, json },
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
    options: { account: { type: 'string', help: 'the owning account', required: true }, name: { type: 'string', help: 'a DNS label', required: true }, upstream: { type: 'string', help: 'http(s) URL of the deploy' }, json },
    positionals: [],
    run: async (v) => {
      const port = publicHttpsPort();
      const project = await adminRequest('POST', '/admin/projects', { accountId: v.account, name: v.name, upstream: v.upstream });
      print(v, project, `project ${project.id} "${project.name}" → ${project.upstream ?? '(no deploy yet)'}\nserved at ${httpsUrl(project.defaultDomain, port)}`);
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
    options: { json },
    positionals: ['PROJECT_ID', 'HOSTNAME'],
    run: async (v, [project, hostname]) => {
      await adminRequest('DELETE', `/admin/projects/${encodeURIComponent(project)}/domains/${encodeURIComponent(hostname)}`);
      // the API answers 204 without a body: --json says what was removed
      print(v, { removed: hostname }, `${hostname} removed; it is no longer served`);
    },
  },
  ...DOMAIN_COMMANDS,
  'redirects add': {
    usage: 'portico redirects add PROJECT_ID --from HOSTNAME --to HOSTNAME [--status 301|302|307|308]',
    summary: 'Make a domain of the project redirect to another hostname (same path and query).',
    options: { from: { type: 'string', help: 'a domain of this project', required: true }, to: { type: 'string', help: 'the hostname to send visitors to', required: true }, status: { type: 'string', help: '301 (default), 302, 307 or 308', integer: [301, 302, 307, 308] }, json },
    positionals: ['PROJECT_ID'],
    run: async (v, [project]) => {
      const port = publicHttpsPort();
      const redirect = await adminRequest('POST', `/admin/projects/${encodeURIComponent(project)}/redirects`, { from: v.from, to: v.to, status: v.status });
      print(v, redirect, `${redirect.from} → ${httpsUrl(redirect.to, port)} (${redirect.status})`);
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

function printVerification(v: Values, domain: { hostname: string; status: string; diagnostics: Array<{ code: string; message: string }> }): void {
  const findings = domain.diagnostics.map((d) => `  - [${d.code}] ${d.message}`).join('\n');
  print(v, domain, `${domain.hostname}: ${domain.status}${findings ? `\n${findings}` : ''}`);
}

function limitsOf(v: Values) {
  if (v['per-minute'] === undefined && v['per-day'] === undefined) return {};
  if (v['per-minute'] === undefined || v['per-day'] === undefined) throw new UsageError('--per-minute and --per-day go together (enterprise limits)');
  return { limits: { perMinute: v['per-minute'], perDay: v['per-day'] } };
}

function print(v: Values, body: Record<string, unknown>, text: string): void {
  console.log(v.json ? JSON.stringify(body, null, 2) : text);
}

const GROUPS = new Set(Object.keys(COMMANDS).filter((n) => n.includes(' ')).map((n) => n.split(' ')[0]));
const isHelp = (arg: string | undefined) => arg === '--help' || arg === '-h' || arg === 'help';

function listing(names: string[]): string {
  return names.map((n) => `  ${COMMANDS[n].usage}\n      ${COMMANDS[n].summary}`).join('\n');
}

function help(): string {
  return `Usage: portico <command> [options]\n\nCommands:\n${listing(Object.keys(COMMANDS))}\n
"portico --version" prints the release. The admin commands talk to PORTICO_ADMIN_URL (default http://127.0.0.1:9180) with PORTICO_ADMIN_TOKEN
(default: the token saved in the data dir on first start). "portico <command> --help" for details.`;
}

/** `portico 0.1.0 (Node v24.…)`: the release, as in package.json, and the runtime */
function version(): string {
  const { version } = JSON.parse(readFileSync(path.join(import.meta.dirname, '../../package.json'), 'utf8')) as { version: string };
  return `portico ${version} (Node ${process.version})`;
}

function groupHelp(group: string): string {
  const names = Object.keys(COMMANDS).filter((n) => n.startsWith(`${group} `));
  return `Usage: portico ${group} <command> [options]\n\nCommands:\n${listing(names)}\n\n"portico ${group} <command> --help" for details.`;
}

function commandHelp(c: Command): string {
  const options = Object.entries(c.options).map(([name, o]) => `  --${name}${o.type === 'string' ? ' VALUE' : ''}    ${o.help}${o.required ? ' (required)' : ''}`);
  return `Usage: ${c.usage}\n\n${c.summary}${options.length ? `\n\nOptions:\n${options.join('\n')}` : ''}`;
}

/** The exit code (0 done, 1 refused or unreachable, 2 bad usage), or -1 while `serve` runs. */
async function main(argv: string[]): Promise<number> {
  const name = [argv.slice(0, 2).join(' '), argv[0]].find((n) => n in COMMANDS);
  if (!name) {
    if (argv.length === 1 && ['--version', '-v', 'version'].includes(argv[0])) {
      console.log(version());
      return 0;
    }
    if (isHelp(argv[0]) && (argv.length === 1 || GROUPS.has(argv[1]))) {
      console.log(argv.length === 1 ? help() : groupHelp(argv[1]));
      return 0;
    }
    if (GROUPS.has(argv[0])) {
      if (isHelp(argv[1]) && argv.length === 2) {
        console.log(groupHelp(argv[0]));
        return 0;
      }
      console.error(`portico: ${argv.length === 1 ? `"${argv[0]}" needs a command` : `unknown command "${argv.join(' ')}"`}\n\n${groupHelp(argv[0])}`);
      return 2;
    }
    // no command is bad usage too: a script calling `portico $EMPTY` must not pass for done
    console.error(`${argv.length === 0 ? 'portico: no command given' : `portico: unknown command "${argv.join(' ')}"`}\n\n${help()}`);
    return 2;
  }
  const command = COMMANDS[name];
  const rest = argv.slice(name.split(' ').length);
  if (rest.includes('--help') || rest.includes('-h')) {
    console.log(commandHelp(command));
    return 0;
  }
  let values: Values;
  let positionals: string[];
  try {
    const parsed = parseArgs({ args: rest, options: Object.fromEntries(Object.entries(command.options).map(([k, o]) => [k, { type: o.type }])), allowPositionals: true, strict: true, tokens: true });
    // parseArgs keeps the last of a repeated option: `--status 301 --status 302` would mean what it ends with
    const given = parsed.tokens.flatMap((token) => (token.kind === 'option' ? [token.name] : []));
    const twice = given.find((option, i) => given.indexOf(option) !== i);
    if (twice !== undefined) throw new UsageError(`--${twice} is given more than once`);
    if (parsed.positionals.length !== command.positionals.length) throw new UsageError(`expected ${command.positionals.join(' ') || 'no arguments'}`);
    values = checkOptions(command.options, parsed.values as Record<string, string | boolean | undefined>);
    positionals = parsed.positionals;
  } catch (err) {
    console.error(`portico ${name}: ${(err as Error).message}\n\n${commandHelp(command)}`);
    return 2;
  }
  try {
    await command.run(values, positionals);
    return name === 'serve' ? -1 : 0;
  } catch (err) {
    if (err instanceof AdminError || err instanceof UsageError || err instanceof ConfigError) {
      console.error(`portico ${name}: ${err.message}`);
      return err instanceof AdminError ? 1 : 2;
    }
    throw err;
  }
}

const argv = process.argv.slice(2);
let outputLost = false;
if (argv[0] !== 'serve') {
  // console.log drops write errors (a full disk, /dev/full, a closed pipe): an answer that never
  // arrived is a failed command, not a silent 0
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (!outputLost && err.code !== 'EPIPE') process.stderr.write(`portico: cannot write the output (${err.code ?? err.message})\n`);
    outputLost = true;
    if (!process.exitCode) process.exitCode = 1;
  });
}
main(argv).then((code) => {
  if (code >= 0) process.exitCode = outputLost && code === 0 ? 1 : code;
});
