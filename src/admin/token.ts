// The admin token: given in config, or made on first start and saved in the data dir (0600), where
// the CLI finds it.
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { writeAtomic } from '../certs/fallback.ts';
import type { Logger } from '../log.ts';

/** The admin token given in config, or the one saved in the data dir on first start. */
export function loadOrCreateToken(dataDir: string, log: Logger): string {
  mkdirSync(dataDir, { recursive: true });
  const file = path.join(dataDir, 'admin-token');
  if (existsSync(file)) {
    const token = readFileSync(file, 'utf8').trim();
    if (token.length >= 16) {
      log.info({ tokenFile: file }, 'admin token from the data dir');
      return token;
    }
    // an operator's own token that is too short to guess-proof: replaced, and said so (the value is not)
    log.warn({ tokenFile: file }, 'the admin token in the data dir is shorter than 16 characters: replaced by a new one');
  }
  const token = randomBytes(24).toString('base64url');
  writeAtomic(file, `${token}\n`, 0o600);
  log.info({ tokenFile: file }, 'created an admin token; the CLI reads it from this file, or set PORTICO_ADMIN_TOKEN');
  return token;
}

