// The shipped configuration file, parsed with variables on top, and the problems a refusal lists: the
// set-up of the configuration tests.
import type { Test } from 'tap';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ConfigError, parseConfig, type Config } from '../../src/config.ts';

export const ROOT = path.resolve(import.meta.dirname, '../..');
export const DEFAULT_FILE = path.join(ROOT, 'config/portico.yaml');
export const YAML = readFileSync(DEFAULT_FILE, 'utf8');

export function withEnv(env: Record<string, string>, text = YAML): Config {
  return parseConfig(text, DEFAULT_FILE, env, ROOT);
}

/** the problems `run` is refused with (a failed check when it is not) */
export function refusal(t: Test, run: () => unknown, what: string): string[] {
  try {
    run();
  } catch (err) {
    t.type(err, ConfigError);
    return (err as ConfigError).problems;
  }
  t.fail(`accepted: ${what}`);
  return [];
}

export function problems(t: Test, env: Record<string, string>, text = YAML): string[] {
  return refusal(t, () => withEnv(env, text), JSON.stringify(env));
}
