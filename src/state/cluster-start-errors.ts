// Why a Redis Cluster could not be connected to at the start (redis.ts's openRedisStores), told in the
// words one server's connection uses (with its hints, redis-errors.ts), naming the nodes, never credentials.
import { Redis, type Cluster } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { withUrlHint } from './redis-errors.ts';

/** how long the start's own connection to a Cluster node, to learn why it fails, may take */
const PROBE_MS = 1_000;
/** ioredis's words for a connection that failed for a reason it did not keep */
const CLOSED = 'Connection is closed.';
const UNTOLD = [CLOSED, 'timeout'];

/**
 * A Cluster's nodes' errors during the start, each node's last that says why ('node error' names the node
 * as "host:port"). ioredis's own error says only "Failed to refresh slots cache." when no seed node
 * answered, and nothing at all when the seeds answered and the nodes their slot map names did not.
 */
export function listenToNodes(client: Redis): { errors: Map<string, Error>; stop(): void } {
  const errors = new Map<string, Error>();
  const onNodeError = (err: Error, node: string) => {
    if (!errors.has(node) || !UNTOLD.includes(err.message)) errors.set(node, err);
  };
  client.on('node error', onNodeError);
  return { errors, stop: () => void client.off('node error', onNodeError) };
}

/**
 * Why a Cluster could not be connected to at the start, in the words one server's connection uses
 * (a certificate refused, WRONGPASS…), naming the nodes, never credentials; null when no node said why.
 * Once the slot map is read, connections go to the names it gives, not to the seeds (a certificate naming
 * localhost refuses them when the slot map names 127.0.0.1): the nodes it names are the ones told of.
 */
export async function clusterStartError(cluster: Cluster, errors: Map<string, Error>): Promise<Error | null> {
  const named = new Set(cluster.slots.flat());
  const failed = [...errors].filter(([node]) => named.size === 0 || named.has(node));
  // the slot map's refresher ignores its connection's errors ("Connection is closed."): the node is asked again, as one server
  const told = await Promise.all(failed.map(async ([node, err]): Promise<[string, Error]> => [node, err.message === CLOSED ? ((await probe(cluster, node)) ?? err) : err]));
  const said = told.filter(([, err]) => !UNTOLD.includes(err.message) && (err as { code?: unknown }).code !== 'ETIMEDOUT');
  if (said.length === 0) return null;
  // the nodes by what each said; a certificate naming other hosts than the one connected to: the names it holds
  const byReason = new Map<string, { nodes: string[]; names?: string }>();
  const { tls, password } = cluster.options.redisOptions ?? {};
  for (const [node, err] of said) {
    const reason = withUrlHint(err, { mode: 'cluster', tls: tls !== undefined, password }, false).message.trimEnd();
    const { code, cert } = err as { code?: unknown; cert?: { subjectaltname?: string } };
    byReason.set(reason, { nodes: [...(byReason.get(reason)?.nodes ?? []), node], names: (code === 'ERR_TLS_CERT_ALTNAME_INVALID' ? cert?.subjectaltname : undefined) ?? byReason.get(reason)?.names });
  }
  const reasons = (what: string) =>
    [...byReason].map(([reason, { nodes, names }]) => `${reason} (${what}${nodes.length > 1 ? 's' : ''} ${nodes.sort().join(', ')}${names ? `; the certificate names ${names}` : ''})`).join(', ');
  if (named.size === 0) return new Error(reasons('seed node'));
  const mismatch = said.some(([, err]) => (err as { code?: unknown }).code === 'ERR_TLS_CERT_ALTNAME_INVALID');
  const hosts = [...new Set(said.map(([node]) => node.slice(0, node.lastIndexOf(':'))))].join(', ');
  const fix = mismatch
    ? `: have the nodes announce a name their certificate holds (cluster-announce-hostname with cluster-preferred-endpoint-type hostname), or give them a certificate that also names ${hosts}`
    : ' (what a node announces: cluster-announce-ip, cluster-announce-hostname)';
  return new Error(`${reasons('node')}: the seed nodes answered, and connections go to the names the Cluster's slot map gives${fix}`);
}

/** One connection to a Cluster `node` ("host:port") with the Cluster's own options: the error it meets, or null. */
async function probe(cluster: Cluster, node: string): Promise<Error | null> {
  const at = node.lastIndexOf(':');
  const connection = new Redis({ ...cluster.options.redisOptions, host: node.slice(0, at), port: Number(node.slice(at + 1)), lazyConnect: true, retryStrategy: () => null, connectTimeout: PROBE_MS });
  let error: Error | null = null;
  connection.on('error', (err: Error) => void (error ??= err));
  const ac = new AbortController();
  await Promise.race([connection.connect().catch(() => undefined), sleep(PROBE_MS, undefined, { signal: ac.signal }).catch(() => undefined)]);
  ac.abort();
  connection.disconnect();
  return error;
}
