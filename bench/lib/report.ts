// The bench's output: numbers, tables, a scenario's rows and ratios, and the verdict against a target.
import { REPEATS } from './settings.ts';
import { median, type Figure, type Ratio, type ScenarioResult } from './measure.ts';

export const fmt = (n: number | null | undefined, digits = 2) => (n === null || n === undefined || !Number.isFinite(n) ? '–' : n.toFixed(digits));
export const fmtInt = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–');

export function table(header: string[], rows: string[][], alignLeft = 1): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => (i < alignLeft ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

export function printScenario(r: ScenarioResult): void {
  const rows = r.rows.map(({ name, samples }) => {
    const rps = samples.map((s) => s.rps);
    const errors = samples.reduce((a, s) => a + s.errors, 0);
    const others = samples.map((s) => s.serverCoreOther).filter((x): x is number => x !== null);
    const clients = samples.map((s) => s.clientCoreBusy).filter((x): x is number => x !== null);
    return [
      name,
      fmtInt(median(rps)),
      samples.length > 1 ? `${fmtInt(Math.min(...rps))}–${fmtInt(Math.max(...rps))}` : '–',
      fmt(median(samples.map((s) => s.p50ms))),
      fmt(median(samples.map((s) => s.p99ms))),
      fmt(median(samples.map((s) => s.cpuPct)), 0),
      fmtInt(median(samples.map((s) => s.perCpuSecond))),
      fmt(Math.max(...samples.map((s) => s.rss)), 0),
      others.length ? fmt(median(others), 0) : '–',
      clients.length ? fmt(median(clients), 0) : '–',
      errors ? `${errors} (${samples.find((s) => s.errors)?.errorDetail})` : '0',
    ];
  });
  console.log('');
  console.log(table(['target', 'req/s', 'min–max', 'p50 ms', 'p99 ms', 'CPU %', 'req/CPU-s', 'RSS MiB', 'core0 other %', 'load cores %', 'errors'], rows));
  const notes = r.rows.flatMap(({ name, samples }) => samples.map((s) => s.note).filter(Boolean).slice(0, 1).map((n) => `${name}: ${n}`));
  if (notes.length) console.log(notes.map((n) => `  ${n}`).join('\n'));
  for (const ratio of r.ratios) console.log(`  ${ratioLine(ratio)}`);
}

export function verdict(x: { value: number; target?: Ratio['target'] | Figure['target'] }): string {
  if (!x.target) return 'info';
  const { op, value } = x.target;
  const ok = op === '>=' ? x.value >= value : op === '<=' ? x.value <= value : x.value < value;
  return ok ? 'PASS' : 'FAIL';
}

const opText = (op: '>=' | '<=' | '<') => (op === '>=' ? '≥' : op === '<=' ? '≤' : '<');

export function ratioLine(ratio: ScenarioResult['ratios'][number]): string {
  const range = REPEATS > 1 ? ` (per repeat ${fmt(ratio.min)}–${fmt(ratio.max)})` : '';
  const target = ratio.target ? `, target ${opText(ratio.target.op)} ${ratio.target.value}: ${verdict(ratio)}` : '';
  return `${ratio.label}: ${fmt(ratio.value)}${range}${target}`;
}

/** The closing table: every ratio and figure of the run, with its target and verdict. */
export function printSummary(results: ScenarioResult[], skipped: string[]): void {
  console.log('\n## Summary (ratios of medians; targets from DESIGN §9)');
  const rows = results.flatMap((r) => {
    const tag = r.title.split(' ')[0];
    return [
      ...r.ratios.map((x) => [`${tag} ${x.label}`, fmt(x.value), REPEATS > 1 ? `${fmt(x.min)}–${fmt(x.max)}` : '–', x.target ? `${opText(x.target.op)} ${x.target.value}` : '–', verdict(x)]),
      ...r.figures.map((x) => [`${tag} ${x.label}`, fmt(x.value, x.digits ?? 2), x.range ?? '–', x.target ? `${opText(x.target.op)} ${x.target.value}` : '–', verdict(x)]),
    ];
  });
  console.log(table(['ratio or figure', 'value', 'per repeat', 'target', 'verdict'], rows));
  if (skipped.length) console.log(`skipped:\n${skipped.map((s) => `  - ${s}`).join('\n')}`);
}
