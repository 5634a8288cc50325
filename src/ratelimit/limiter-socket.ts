// The socket of the limiter's own connection (limiter-connection.ts): its options, how it is opened,
// and the commands it sends before any call. Used once per connection, never per call.
import net from 'node:net';
import tls from 'node:tls';
import { bulk } from './resp.ts';

export interface LimiterConnectionOptions {
  host?: string;
  port?: number;
  /** a Unix socket instead of host and port */
  path?: string;
  family?: number;
  username?: string;
  password?: string;
  db?: number;
  /** set: TLS (rediss://), with these options unless `true` */
  tls?: tls.ConnectionOptions | true;
  connectTimeoutMs?: number;
  /** bounds each call from the moment it is made; undefined: no bound */
  commandTimeoutMs?: number;
  connectionName?: string;
}

/** A socket to the server `o` names: TLS when asked, Nagle off, keep-alive on, destroyed past connectTimeoutMs */
export function openSocket(o: LimiterConnectionOptions): net.Socket {
  const target = o.path ? { path: o.path } : { host: o.host ?? '127.0.0.1', port: o.port ?? 6379, family: o.family };
  const socket = o.tls
    ? tls.connect({ ...target, servername: o.host && !net.isIP(o.host) ? o.host : undefined, ...(o.tls === true ? {} : o.tls) })
    : net.connect(target);
  socket.setNoDelay(true);
  socket.setKeepAlive(true, 30_000);
  if (o.connectTimeoutMs) socket.setTimeout(o.connectTimeoutMs, () => socket.destroy());
  return socket;
}

/**
 * What a new connection sends first, in this order, as RESP. `required`: AUTH and SELECT must work;
 * a name or a preloaded script are conveniences.
 */
export function setupCommands(o: LimiterConnectionOptions, script: string): Array<{ text: string; required: boolean }> {
  const setup: string[][] = [];
  if (o.password) setup.push(o.username ? ['AUTH', o.username, o.password] : ['AUTH', o.password]);
  if (o.db) setup.push(['SELECT', String(o.db)]);
  if (o.connectionName) setup.push(['CLIENT', 'SETNAME', o.connectionName]);
  setup.push(['SCRIPT', 'LOAD', script]);
  return setup.map((command) => ({ text: `*${command.length}\r\n${command.map(bulk).join('')}`, required: command[0] === 'AUTH' || command[0] === 'SELECT' }));
}
