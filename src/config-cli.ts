// The CLI's settings: where the admin API listens and its token, read from the same file and
// variables as the server's. Its own file because it is a second, partial reader: it checks only what
// a command needs, where config.ts checks everything.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Reader } from './config-reader.ts';
import { VARIABLE_AT, applyEnv } from './config-env.ts';
import { ipAddress } from './config-checks.ts';
import { ConfigError, configFileOf, parseTree, readText, resolvePath } from './config-source.ts';

/**
 * Where the CLI finds the admin API, read as the server reads it: PORTICO_ADMIN_URL, else admin.host
 * and admin.port of the configuration file (PORTICO_CONFIG …) with the variables over it; the token
 * from PORTICO_ADMIN_TOKEN or admin.token, else <dataDir>/admin-token. Only these settings are read: a
 * problem elsewhere in the file is the server's to report, one in these stops the command.
 */
export function cliSettings(env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): { url: string; token: string | null; tokenFile: string; tokenFrom: string } {
  const configFile = configFileOf(env, cwd);
  // with both variables the file holds nothing the command needs
  const tree = env.PORTICO_ADMIN_URL && env.PORTICO_ADMIN_TOKEN ? {} : parseTree(readText(configFile), configFile);
  // the variables' own problems (a blank list …) are in settings the command does not read
  applyEnv(tree, env, []);
  const problems: string[] = [];
  const read = new Reader(tree, problems, VARIABLE_AT);
  let url = env.PORTICO_ADMIN_URL || null;
  if (url === null) {
    const host = ipAddress(read.string('admin.host', '127.0.0.1'), 'admin.host (PORTICO_ADMIN_HOST)', '127.0.0.1 or ::1', problems) ?? '127.0.0.1';
    url = `http://${host.includes(':') ? `[${host}]` : host}:${read.port('admin.port', 9180)}`;
  }
  let token = read.secret('admin.token');
  const tokenFile = path.join(resolvePath(cwd, read.string('dataDir', './data')), 'admin-token');
  if (problems.length > 0) throw new ConfigError(problems);
  // where the token came from, for a refusal to name (never the token)
  let tokenFrom = env.PORTICO_ADMIN_TOKEN?.trim() ? 'PORTICO_ADMIN_TOKEN' : `admin.token of ${configFile}`;
  if (!token) {
    tokenFrom = tokenFile;
    try {
      token = readFileSync(tokenFile, 'utf8').trim() || null;
    } catch {
      token = null;
    }
  }
  return { url, token, tokenFile, tokenFrom };
}
