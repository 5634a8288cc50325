// What a reload (POST /admin/reload, SIGHUP) checks of the certificate files a new configuration names
// before applying it: each key pair must make a TLS context. A refusal carries its reason the way
// loadConfig's refusals carry theirs, so the admin answer lists it with them (400).
import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import type { Config } from './config.ts';

/** A reload refused for one reason. */
export function refuse(problem: string): never {
  throw Object.assign(new Error(problem), { problems: [problem] });
}

/** The key pair `read` returns (null: none), checked by making a TLS context of it; a refusal names `files`. */
export function checkedPair<T extends { cert: string; key: string } | null>(read: () => T, files: string): T {
  let pair: T;
  try {
    pair = read();
    if (pair) createSecureContext({ cert: pair.cert, key: pair.key });
  } catch (err) {
    return refuse(`${files}: not a usable certificate and key (${(err as Error).message})`);
  }
  return pair;
}

/** The operator's wildcard certificate for the projects' default hostnames (platform.certFile), if set. */
export function readPlatformCertificate(config: Config): { cert: string; key: string } | null {
  if (!config.platform.certFile || !config.platform.keyFile) return null;
  return { cert: readFileSync(config.platform.certFile, 'utf8'), key: readFileSync(config.platform.keyFile, 'utf8') };
}
