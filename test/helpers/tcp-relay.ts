// A TCP relay on loopback, for tests that step between a client and a real server (redis-server, a
// sentinel): each connection goes to the port `target()` names when it comes (a test may set it late,
// or switch it), and each chunk passes through the connection's hooks on its way, to be forwarded at
// once, later, or not at all.
import net from 'node:net';
import type { AddressInfo } from 'node:net';

export interface Link {
  /** writes to the server (nothing once it is closed) */
  toServer(bytes: Buffer): void;
  /** writes to the client (nothing once it is closed) */
  toClient(bytes: Buffer): void;
  /** closes both sides at once: what was not forwarded is lost */
  cut(): void;
}

export interface LinkHooks {
  /** a chunk from the client; `send` forwards it to the server (the default: at once) */
  up?(bytes: Buffer, send: (bytes: Buffer) => void): void;
  /** a chunk from the server; `send` delivers it to the client (the default: at once) */
  down?(bytes: Buffer, send: (bytes: Buffer) => void): void;
}

export interface Relay {
  port: number;
  close(): Promise<void>;
}

/** Listens on a free loopback port; `hooks` is asked once per connection (its state is that connection's). */
export async function startRelay(target: () => number | undefined, hooks: (link: Link) => LinkHooks = () => ({})): Promise<Relay> {
  const sockets = new Set<net.Socket>();
  const relay = net.createServer((client) => {
    // nothing is read before there is a server to forward to
    client.pause();
    sockets.add(client);
    const connect = () => {
      if (client.destroyed) return;
      const port = target();
      if (port === undefined) return void setTimeout(connect, 50);
      const server = net.connect(port, '127.0.0.1');
      sockets.add(server);
      const link: Link = {
        toServer: (bytes) => void (server.destroyed || server.write(bytes)),
        toClient: (bytes) => void (client.destroyed || client.write(bytes)),
        cut: () => {
          client.destroy();
          server.destroy();
        },
      };
      const { up, down } = hooks(link);
      client.on('data', (bytes: Buffer) => (up ? up(bytes, link.toServer) : link.toServer(bytes)));
      server.on('data', (bytes: Buffer) => (down ? down(bytes, link.toClient) : link.toClient(bytes)));
      for (const socket of [client, server]) {
        socket.on('close', () => {
          sockets.delete(socket);
          link.cut();
        });
        socket.on('error', link.cut);
      }
      client.resume();
    };
    connect();
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  return {
    port: (relay.address() as AddressInfo).port,
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => relay.close(() => resolve()));
    },
  };
}
