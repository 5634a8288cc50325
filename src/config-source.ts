// Where the configuration comes from: which file (PORTICO_CONFIG, the working directory's or the
// install's), its text and its YAML tree, and the error every problem is thrown as. Its own file
// because both readers of the file share it: the server's (config.ts) and the CLI's (config-cli.ts).
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { createRequire } from 'node:module';
import os from 'node:os';
import { isObject } from './config-reader.ts';

export class ConfigError extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`invalid configuration:\n  - ${problems.join('\n  - ')}`);
    this.problems = problems;
  }
}

const DEFAULT_FILE = 'config/portico.yaml';
/** the defaults that come with the install (src/ or dist/ → ../config) */
const INSTALLED_FILE = fileURLToPath(new URL('../config/portico.yaml', import.meta.url));

/**
 * A path setting as a shell would read it: `~` and `~/…` are the home directory (a systemd unit's
 * Environment= or a YAML value is not expanded by any shell, and `~/data` would otherwise be a
 * directory named `~` in the working directory); anything else relative is the working directory's.
 */
export function resolvePath(cwd: string, value: string): string {
  if (value === '~' || value.startsWith('~/')) return path.join(os.homedir(), value.slice(1));
  return path.resolve(cwd, value);
}

/** PORTICO_CONFIG; else config/portico.yaml in the working directory; else the install's defaults
 * (Portico started from another directory). Relative paths in it are the working directory's. */
export function configFileOf(env: NodeJS.ProcessEnv, cwd: string): string {
  if (env.PORTICO_CONFIG) return resolvePath(cwd, env.PORTICO_CONFIG);
  const local = path.resolve(cwd, DEFAULT_FILE);
  return existsSync(local) || !existsSync(INSTALLED_FILE) ? local : INSTALLED_FILE;
}

export function readText(configFile: string): string {
  try {
    return readFileSync(configFile, 'utf8');
  } catch (err) {
    throw new ConfigError([`cannot read ${configFile}: ${(err as Error).message}`]);
  }
}

// yaml loads with the first file parsed, not with this module: a CLI command given PORTICO_ADMIN_URL
// and PORTICO_ADMIN_TOKEN reads no file, and it is the same module (CommonJS) that `import` would load
let yaml: typeof import('yaml') | undefined;
export function parseTree(text: string, configFile: string): Record<string, unknown> {
  yaml ??= createRequire(import.meta.url)('yaml') as typeof import('yaml');
  let tree: unknown;
  try {
    tree = yaml.parse(text) ?? {};
  } catch (err) {
    throw new ConfigError([`${configFile} is not valid YAML: ${(err as Error).message}`]);
  }
  if (!isObject(tree)) throw new ConfigError([`${configFile} must hold a mapping at the top level`]);
  return tree;
}
