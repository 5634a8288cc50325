// Node's module compile cache (V8 code cache on disk): with it warm, a start skips most of parsing
// and compiling the ~300 modules the server loads, and type-stripped `.ts` sources are cached too. The entry imports this module first, so the cache is in force before
// anything heavy loads. It is only an optimisation: a missing, read-only or corrupt directory means
// compiling as usual, never a failed start; Node checks every entry against its source.
//
// The directory: PORTICO_COMPILE_CACHE (`off` turns it off), else `portico` in the user's cache
// directory (`$XDG_CACHE_HOME`, else `~/.cache`): it survives reboots, is not a shared,
// world-writable /tmp path whose contents another user could plant, and is outside the checkout,
// which `npm start` writes nothing into but the data and certs dirs (DESIGN §1). Entries are keyed by
// Node's version and checked against their source, so installs sharing it never mix. Read here
// rather than in config.ts because it must act before config.ts and its dependencies are compiled.
import { enableCompileCache, flushCompileCache } from 'node:module';
import { mkdirSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';

/** The cache directory, or null when there is none to use (no home directory to keep it in). */
export function compileCacheDir(env: NodeJS.ProcessEnv, home = homeOrEmpty()): string | null {
  const setting = env.PORTICO_COMPILE_CACHE?.trim();
  if (setting === 'off' || setting === '0' || setting === 'false') return null;
  if (setting) return path.resolve(setting);
  // the XDG Base Directory rule: a relative value is to be ignored
  const xdg = env.XDG_CACHE_HOME?.trim();
  if (xdg && path.isAbsolute(xdg)) return path.join(xdg, 'portico');
  return home && path.isAbsolute(home) && home !== '/' ? path.join(home, '.cache', 'portico') : null;
}

function homeOrEmpty(): string {
  try {
    return homedir();
  } catch {
    // no passwd entry and no HOME: no cache
    return '';
  }
}

export function startCompileCache(env: NodeJS.ProcessEnv = process.env): void {
  try {
    const directory = compileCacheDir(env);
    if (directory !== null && makeDirectory(directory)) enableCompileCache(directory);
  } catch {
    // enableCompileCache reports FAILED rather than throwing; a stat or mkdir may throw (EACCES,
    // ENOTDIR): either way the start goes on without the cache
  }
}

/**
 * `mkdir -p`, one level at a time. Node's recursive mkdir (which enableCompileCache uses too) spins
 * forever where mkdir answers ENOENT under a directory that exists, as procfs does (/proc/x).
 */
export function makeDirectory(dir: string): boolean {
  const stat = statSync(dir, { throwIfNoEntry: false });
  if (stat) return stat.isDirectory();
  const parent = path.dirname(dir);
  if (parent === dir || !makeDirectory(parent)) return false;
  try {
    mkdirSync(dir);
  } catch {
    // EEXIST from a concurrent start is fine; anything else shows in the check below
  }
  return statSync(dir, { throwIfNoEntry: false })?.isDirectory() ?? false;
}

/**
 * Writes what this process compiled so far. Node writes at exit too, but a server killed without
 * one (SIGKILL, a crash) would otherwise start cold every time.
 */
export function persistCompileCache(): void {
  try {
    flushCompileCache();
  } catch {
    // an unwritable directory only costs the next start its warm cache
  }
}

startCompileCache();
