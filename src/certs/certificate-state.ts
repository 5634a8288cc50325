// A domain's certificate state (CertificateState) as an order writes it: the order's own writes go
// only onto the domain it read, never onto one removed and added back under the same name meanwhile.
// Shared by ordering.ts and the files it hands steps to (queueing.ts, pause.ts, backoff.ts).
import type { DomainEvent } from '../domains/events.ts';
import { sameDomain } from '../domains/same-domain.ts';
import type { Domain, DomainStore } from '../state/types.ts';

/**
 * `of`: only while the domain of that name is still this one. Written only onto the domain `update`
 * read (the store compares its createdAt as it writes): one removed and added back between the read
 * and the write does not get the old one's state.
 */
export async function setCertificateState(domains: DomainStore, hostname: string, update: (domain: Domain) => Domain['certificate'], event?: DomainEvent, of?: Domain): Promise<void> {
  const domain = await domains.get(hostname);
  if (!domain || (of && !sameDomain(of, domain))) return;
  await domains.setCertificate(hostname, update(domain), event, domain.createdAt);
}
