import net from 'node:net';
import { readFileSync } from 'node:fs';

// Ports for peers that cannot listen on port 0 (redis-server, pebble, challtestsrv, prometheus), picked
// below the kernel's ephemeral range. listen(0) and every outgoing connection take their local port from
// that range, so a port found free there could be taken by the suite's own clients between the check and
// the peer's start, or while a killed Redis is down before its restart on the same port (pebble's
// "bind: address already in use" was seen in a full run). Below the range only another pick can
// collide: this process never hands a port out twice, and other test processes choose at random among
// ~20,000.
const LOWEST = 10_000;
const ephemeralLow = (() => {
  try {
    return Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || 0;
  } catch {
    return 0;
  }
})();
const handedOut = new Set<number>();

/**
 * A TCP port on 127.0.0.1 that is free now and that no outgoing connection will take. With `plus`,
 * port + plus is free too and below the ephemeral range (a Redis Cluster node's bus port is +10000).
 */
export async function freePort({ plus = 0 }: { plus?: number } = {}): Promise<number> {
  const top = Math.min(ephemeralLow, 65_536) - plus;
  for (let attempt = 0; top - LOWEST >= 1_000 && attempt < 100; attempt++) {
    const port = LOWEST + Math.floor(Math.random() * (top - LOWEST));
    if (handedOut.has(port) || (plus && handedOut.has(port + plus))) continue;
    handedOut.add(port);
    if (await canListen(port) && (!plus || await canListen(port + plus))) return port;
  }
  // no room below the ephemeral range on this machine: a port the kernel says is free
  for (;;) {
    const port = await kernelPort();
    if (handedOut.has(port) || port + plus > 65_535) continue;
    handedOut.add(port);
    if (!plus || await canListen(port + plus)) return port;
  }
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

function kernelPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
