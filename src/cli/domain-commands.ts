// `portico domains list | events | import`: reading a project's domains, one domain's timeline in
// plain words, and adding many domains from a file (DESIGN §1).
import { readFile } from 'node:fs/promises';
import { adminRequest, AdminError } from './admin-client.ts';
import { json, UsageError, type Command } from './options.ts';

interface DomainView {
  hostname: string;
  status: string;
  health: string;
  certificate: { status: string; issuer?: string; notAfter?: string; nextAttemptAt?: string; queuePosition?: number; lastError?: string };
  nextCheckAt?: string;
  records: Array<{ type: string; name: string; value: string }>;
}

interface EventView {
  at: string;
  type: string;
  message: string;
}

const base = (project: string) => `/admin/projects/${encodeURIComponent(project)}/domains`;

/** what each event type is called in the timeline */
const LABELS: Record<string, string> = {
  added: 'Added',
  dns_checked: 'DNS checked',
  verified: 'Verified',
  verification_failed: 'Verification failed',
  certificate_queued: 'Waiting for the CA',
  order_placed: 'Certificate ordered',
  challenge_served: 'Challenge answered',
  certificate_issued: 'Certificate issued',
  order_failed: 'Order failed',
  renewal_scheduled: 'Renewal planned',
  misconfigured: 'Misconfigured',
  recovered: 'Recovered',
  removed: 'Removed',
};

/** 2026-11-24 18:05:12 UTC */
const when = (iso: string) => iso.replace('T', ' ').replace(/\.\d+Z$|Z$/, ' UTC');

function certificateText(c: DomainView['certificate']): string {
  if (c.status === 'queued') return `queued${c.queuePosition ? ` #${c.queuePosition}` : ''}${c.nextAttemptAt ? ` (by ${when(c.nextAttemptAt)})` : ''}`;
  if (c.status === 'issued') return `issued${c.notAfter ? `, until ${c.notAfter.slice(0, 10)}` : ''}`;
  return c.status;
}

function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join('  ').trimEnd()).join('\n');
}

export const DOMAIN_COMMANDS: Record<string, Command> = {
  'domains list': {
    usage: 'portico domains list PROJECT_ID [--status pending|verified|failed] [--health ok|misconfigured]',
    summary: 'List a project\'s domains with their status, health, certificate and next automatic DNS check.',
    options: { status: { type: 'string', help: 'only domains with this status' }, health: { type: 'string', help: 'only domains with this health' }, json },
    positionals: ['PROJECT_ID'],
    run: async (v, [project]) => {
      const query = new URLSearchParams();
      if (typeof v.status === 'string') query.set('status', v.status);
      if (typeof v.health === 'string') query.set('health', v.health);
      const domains = (await adminRequest('GET', `${base(project)}${query.size ? `?${query}` : ''}`)) as DomainView[];
      if (v.json) return console.log(JSON.stringify(domains, null, 2));
      if (domains.length === 0) return console.log('no domains');
      const rows = domains.map((d) => [d.hostname, d.status, d.health, certificateText(d.certificate), d.nextCheckAt ? when(d.nextCheckAt) : '-']);
      console.log(table([['HOSTNAME', 'STATUS', 'HEALTH', 'CERTIFICATE', 'NEXT CHECK'], ...rows]));
    },
  },
  'domains events': {
    usage: 'portico domains events PROJECT_ID HOSTNAME',
    summary: 'Show what happened to a domain, oldest first: DNS checks and what they found, verification, the certificate order and its outcome, renewals, misconfiguration, recovery.',
    options: { json },
    positionals: ['PROJECT_ID', 'HOSTNAME'],
    run: async (v, [project, hostname]) => {
      const events = (await adminRequest('GET', `${base(project)}/${encodeURIComponent(hostname)}/events`)) as EventView[];
      if (v.json) return console.log(JSON.stringify(events, null, 2));
      if (events.length === 0) return console.log(`${hostname}: nothing has happened yet`);
      const width = Math.max(...events.map((e) => (LABELS[e.type] ?? e.type).length));
      console.log(events.map((e) => `${when(e.at)}  ${(LABELS[e.type] ?? e.type).padEnd(width)}  ${e.message}`).join('\n'));
    },
  },
  'domains import': {
    usage: 'portico domains import PROJECT_ID FILE',
    summary: 'Add every hostname in FILE (one per line; blank lines and # comments are skipped). Each line is reported; a bad line does not stop the others. Exits 1 when any line failed.',
    options: {},
    positionals: ['PROJECT_ID', 'FILE'],
    run: async (_v, [project, file]) => {
      let text: string;
      try {
        text = await readFile(file, 'utf8');
      } catch (err) {
        throw new AdminError(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
      }
      let added = 0;
      let failed = 0;
      const lines = text.split(/\r?\n/);
      for (let i = 0; i < lines.length; i++) {
        const hostname = lines[i].replace(/#.*/, '').trim();
        if (hostname === '') continue;
        try {
          const domain = (await adminRequest('POST', base(project), { hostname })) as DomainView;
          added++;
          const record = domain.records[0];
          console.log(`line ${i + 1}: ${domain.hostname} added (${domain.status})${record ? `; create ${record.type} ${record.name} → ${record.value}` : ''}`);
        } catch (err) {
          // every other line would fail the same way
          if (err instanceof UsageError || (err instanceof AdminError && err.fatal)) throw err;
          failed++;
          console.log(`line ${i + 1}: ${hostname} not added: ${(err as Error).message}`);
        }
      }
      console.log(`${added} added, ${failed} failed${added > 0 ? '; Portico checks their DNS by itself and orders certificates once they point here' : ''}`);
      if (failed > 0) throw new AdminError(`${failed} of ${added + failed} lines were not added (see above)`);
    },
  },
};
