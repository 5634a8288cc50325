// ioredis's Sentinel connector, passing over a sentinel that names a primary the follower
// (sentinel-switch.ts) refuses: a reconnect asks one sentinel, and one that has not learned of the
// failover yet names the old primary.
import { SentinelConnector, type Redis, type RedisOptions } from 'ioredis';
import type { RedisAddress } from './redis-url.ts';

/** what ioredis's `Connector` option takes */
export type ConnectorClass = NonNullable<RedisOptions['Connector']>;

/**
 * ioredis's SentinelConnector, asking the next sentinel when one names a primary `agrees` refuses (as
 * it does when one does not answer). It wraps the connector's `resolveMaster` (ioredis 5 and 6): should
 * that method go, the connector is ioredis's own, and the check on `ready` in sentinel-switch.ts still
 * moves a connection.
 */
export function agreeingConnector(agrees: (found: RedisAddress) => Promise<boolean>): ConnectorClass {
  type Resolve = (this: SentinelConnector, client: Redis) => Promise<RedisAddress | null>;
  const resolveMaster = (SentinelConnector.prototype as unknown as { resolveMaster?: Resolve }).resolveMaster;
  if (typeof resolveMaster !== 'function') return SentinelConnector as unknown as ConnectorClass;
  class AgreeingConnector extends SentinelConnector {}
  const resolve: Resolve = async function (client) {
    const found = await resolveMaster.call(this, client);
    return found !== null && (await agrees(found)) ? found : null;
  };
  Object.defineProperty(AgreeingConnector.prototype, 'resolveMaster', { value: resolve });
  return AgreeingConnector as unknown as ConnectorClass;
}
