// A domain's timeline (DESIGN §6): every step that happens to a domain — DNS checks and what they
// found, verification, queueing behind a CA limit, orders, challenges, issuance or the CA's error,
// renewals, misconfiguration and recovery, removal — is one event, kept with the domain.
//
// How to write one (both backends, src/state/types.ts DomainStore):
// - with the change it describes, in the same atomic step: pass it as the last argument of
//   `domains.create(domain, event)`, `domains.update(domain, event)`,
//   `domains.setCertificate(hostname, certificate, event)` or `domains.remove(hostname, at, event)`;
// - for a step that changes nothing else (a challenge served, an order placed):
//   `domains.appendEvent(hostname, event)`;
// - read them with `domains.events(hostname)`: oldest first, at most MAX_DOMAIN_EVENTS.
// `domainEvent(type, message, details)` stamps the time. Messages are for the domain's owner: say
// what happened and what to do in plain words; put machine-readable facts in `details`.

export type DomainEventType =
  | 'added'
  | 'dns_checked'
  | 'verified'
  | 'verification_failed'
  | 'certificate_queued'
  | 'order_placed'
  | 'challenge_served'
  | 'certificate_issued'
  | 'order_failed'
  | 'renewal_scheduled'
  | 'misconfigured'
  | 'recovered'
  | 'removed';

export const DOMAIN_EVENT_TYPES: readonly DomainEventType[] = [
  'added', 'dns_checked', 'verified', 'verification_failed', 'certificate_queued', 'order_placed', 'challenge_served',
  'certificate_issued', 'order_failed', 'renewal_scheduled', 'misconfigured', 'recovered', 'removed',
];

export interface DomainEvent {
  /** ISO 8601 time of the step */
  at: string;
  type: DomainEventType;
  /** one sentence an owner can read */
  message: string;
  details?: Record<string, unknown>;
}

/** what the store's write methods take: one event, or several written together (in this order) */
export type EventsToWrite = DomainEvent | readonly DomainEvent[] | undefined;

export function eventList(events: EventsToWrite): readonly DomainEvent[] {
  return events === undefined ? [] : Array.isArray(events) ? events : [events as DomainEvent];
}

/** the newest events kept per domain; older ones are dropped as new ones arrive */
export const MAX_DOMAIN_EVENTS = 200;

export function domainEvent(type: DomainEventType, message: string, details?: Record<string, unknown>, at: number = Date.now()): DomainEvent {
  const event: DomainEvent = { at: new Date(at).toISOString(), type, message };
  if (details && Object.keys(details).length > 0) event.details = details;
  return event;
}

/**
 * The timeline oldest first by `at`. Events are stamped when their step happens and written when it
 * is stored, so two steps at once (a check and an order) can be written in the other order, some ms
 * apart; the sort is stable, so events of one moment keep the order they were written in.
 */
export function oldestFirst(events: DomainEvent[]): DomainEvent[] {
  return events.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
}

/** `events` with `added` appended, keeping only the newest MAX_DOMAIN_EVENTS (for backends that keep the list in one value). */
export function appendBounded(events: readonly DomainEvent[], added: readonly DomainEvent[]): DomainEvent[] {
  const all = [...events, ...added];
  return all.length > MAX_DOMAIN_EVENTS ? all.slice(all.length - MAX_DOMAIN_EVENTS) : all;
}
