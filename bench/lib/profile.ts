// Reads a V8 .cpuprofile (node --cpu-prof) and lists where the busy time went: self time per
// function and per module (idle samples left out).
import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

export interface ProfileSummary {
  busyMs: number;
  functions: Array<{ name: string; pct: number }>;
  modules: Array<{ name: string; pct: number }>;
}

function shortUrl(url: string): string {
  return url
    .replace(/^file:\/\/.*?\/node_modules\/((@[^/]+\/)?[^/]+)\//, '$1/')
    .replace(/^file:\/\/.*?\/(src|bench|test)\//, '$1/');
}

function moduleOf(url: string): string {
  if (!url) return '(native / VM)';
  const pkg = /\/node_modules\/((@[^/]+\/)?[^/]+)\//.exec(url);
  if (pkg) return `npm:${pkg[1]}`;
  const internal = /^node:(internal\/)?([^/]+)/.exec(url);
  if (internal) return `node:${internal[2]}`;
  return shortUrl(url);
}

export function summarizeProfile(file: string, top = 15): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as { nodes: Node[]; samples: number[]; timeDeltas: number[] };
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const fns = new Map<string, number>();
  const mods = new Map<string, number>();
  let busy = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i]);
    const dt = profile.timeDeltas[i] ?? 0;
    if (!node || node.callFrame.functionName === '(idle)') continue;
    busy += dt;
    const cf = node.callFrame;
    const name = cf.url ? `${cf.functionName || '(anonymous)'} ${shortUrl(cf.url)}:${cf.lineNumber + 1}` : cf.functionName || '(anonymous)';
    fns.set(name, (fns.get(name) ?? 0) + dt);
    const mod = cf.url ? moduleOf(cf.url) : cf.functionName.startsWith('(') ? cf.functionName : `native ${cf.functionName}`;
    mods.set(mod, (mods.get(mod) ?? 0) + dt);
  }
  const rank = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]).slice(0, top).map(([name, t]) => ({ name, pct: (t / busy) * 100 }));
  return { busyMs: busy / 1000, functions: rank(fns), modules: rank(mods) };
}
