// The issuers put together for the certificate manager: an ACME client per directory (loaded with the
// first order: acme-client, axios and node-forge weigh ~37 MiB), the chain that tries them in order
// with CAA and the CA limits, the queue, renewal information, and the limit gauges.
import type { Metrics } from '../metrics.ts';
import { checkCaa, type Resolver } from '../domains/verifier.ts';
import type { AcmeIssuer } from './acme-issuer.ts';
import { accountRequests, type CaLimitStore } from './ca-limits.ts';
import { createIssuerChain } from './issuer-chain.ts';
import type { IssuerSettings } from './issuers.ts';
import type { OrderQueue } from './order-queue.ts';
import type { AccountKeyStore, ChallengeStore, StoredCertificate } from './types.ts';

// how long a CAA check waits for an issuer to tell Portico's account URL
const ACCOUNT_LOOKUP_MS = 5_000;

/** Where the issuers keep their state: the backend's limits, queue, and an account key per directory. */
export interface IssuingState {
  limits: CaLimitStore;
  queue: OrderQueue;
  accountKeys(directory: string): AccountKeyStore;
}

export interface IssuingOptions {
  issuers: readonly IssuerSettings[];
  email: string | null;
  state: IssuingState;
  challenges: ChallengeStore;
  /** for the CAA check before each issuer (the verifier's resolvers) */
  resolver: Resolver;
  /** extra CA trust for the directories' HTTPS (NODE_EXTRA_CA_CERTS: a test CA) */
  ca?: string;
  metrics: Metrics;
  now?: () => number;
}

export function createIssuing(options: IssuingOptions) {
  const { issuers, state, metrics } = options;
  const now = options.now ?? Date.now;
  const clients = new Map<string, Promise<AcmeIssuer>>();
  const open = (issuer: IssuerSettings): Promise<AcmeIssuer> => {
    let client = clients.get(issuer.id);
    if (client === undefined) {
      client = import('./acme-issuer.ts').then(({ createAcmeIssuer }) => createAcmeIssuer({
        directoryUrl: issuer.directory,
        email: options.email,
        accountKeys: state.accountKeys(issuer.directory),
        challenges: options.challenges,
        ...(options.ca === undefined ? {} : { ca: options.ca }),
        eab: issuer.eab,
      }));
      clients.set(issuer.id, client);
    }
    return client;
  };
  const chain = createIssuerChain({
    issuers,
    open,
    limits: state.limits,
    // only a CAA set that names other CAs (or another account at this one) stops an issuer; a DNS
    // failure leaves the decision to the CA
    caaAllows: async (hostname, issuer) => {
      const accountUris = () => accountUri(issuer).then((uri) => (uri === null ? undefined : [uri]));
      return !(await checkCaa(hostname, issuer.caa, options.resolver, { accountUris })).some((d) => d.code === 'caa_blocks_ca');
    },
    now,
  });

  /**
   * Portico's account URL at an issuer, for CAA `accounturi` (RFC 8657 §3): the account is looked up
   * (or registered, as the first order would) once; null when the CA does not answer within
   * ACCOUNT_LOOKUP_MS, so a DNS check does not wait out a CA's request timeout.
   */
  async function accountUri(issuer: IssuerSettings): Promise<string | null> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<null>((resolve) => (timer = setTimeout(resolve, ACCOUNT_LOOKUP_MS, null)));
    const lookup = open(issuer).then((client) => client.accountUri()).catch(() => null);
    try {
      return await Promise.race([lookup, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  return {
    chain,
    queue: state.queue,
    /** Portico's account URLs at every issuer that answered; undefined when none did (caa.ts) */
    async accountUris(): Promise<readonly string[] | undefined> {
      const uris = (await Promise.all(issuers.map(accountUri))).filter((uri) => uri !== null);
      return uris.length > 0 ? uris : undefined;
    },
    /** RFC 9773 renewal information, from the CA that issued the certificate */
    async renewalInfo(stored: StoredCertificate) {
      const issuer = issuers.find((i) => i.directory === stored.directory);
      return issuer === undefined ? null : (await open(issuer)).renewalInfo(stored.certPem, now());
    },
    /**
     * When the order at each place in line can be placed, by the account-wide order budgets read
     * once: the soonest any issuer has refilled enough for everyone ahead and that one. Null when
     * some issuer keeps no such limit (the wait is then another limit's: per registered domain or
     * hostname).
     */
    async queueEstimates(): Promise<((place: number) => number) | null> {
      const budgets: Array<{ tokens: number; refillMs: number }> = [];
      for (const issuer of issuers) {
        const requests = accountRequests(issuer);
        if (requests.length === 0) return null;
        const [tokens] = await state.limits.peek(issuer.id, requests, now());
        budgets.push({ tokens, refillMs: requests[0].periodMs / requests[0].capacity });
      }
      const at = now();
      return (place) => Math.min(...budgets.map((b) => at + Math.max(0, Math.ceil((place - b.tokens) * b.refillMs))));
    },
    /** the queue and limit gauges, from the shared state (every instance shows the same) */
    async refreshLimitMetrics(): Promise<void> {
      metrics.acmeQueueDepth.set(await state.queue.size());
      for (const issuer of issuers) {
        const requests = accountRequests(issuer);
        if (requests.length === 0) continue;
        const [left] = await state.limits.peek(issuer.id, requests, now());
        metrics.acmeLimitRemaining.set({ issuer: issuer.name, limit: 'new_orders' }, Math.floor(left));
      }
    },
  };
}
