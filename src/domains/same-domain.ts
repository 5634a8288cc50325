import type { Domain } from '../state/types.ts';

/**
 * The same domain, not only the same name: a domain removed and added back under its name is a new
 * one (another createdAt), and what was found or ordered for the old one (a DNS check, a certificate
 * order, their steps on the timeline) is not the new one's.
 */
export function sameDomain(a: Domain, b: Domain | null): b is Domain {
  return b !== null && a.hostname === b.hostname && a.createdAt === b.createdAt && a.accountId === b.accountId && a.projectId === b.projectId;
}
