// The client IP: the TCP peer (or the PROXY protocol source), unless that peer is a trusted proxy;
// then the right-most X-Forwarded-For entry that is not itself a trusted proxy.
import net from 'node:net';
import { parseCidr } from '../config.ts';

export type Trust = (address: string) => boolean;

export function createTrust(cidrs: readonly string[]): Trust {
  if (cidrs.length === 0) return () => false;
  const list = new net.BlockList();
  for (const cidr of cidrs) {
    const [address, prefix, family] = parseCidr(cidr)!;
    list.addSubnet(address, prefix, family);
  }
  return (address) => {
    const plain = plainAddress(address);
    const family = net.isIP(plain);
    return family !== 0 && list.check(plain, family === 4 ? 'ipv4' : 'ipv6');
  };
}

export function clientIp(socketPeer: string, forwardedFor: string | string[] | undefined, trust: Trust): string {
  const peer = plainAddress(socketPeer);
  if (!trust(peer) || forwardedFor === undefined) return peer;
  const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor).split(',').map((s) => s.trim()).filter(Boolean);
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = hops[i];
    if (net.isIP(hop) === 0) return peer; // garbage in a forwarded header: believe the socket
    if (!trust(hop)) return hop;
  }
  return hops[0] ?? peer;
}

/** `::ffff:203.0.113.7` (an IPv4 peer on a dual-stack socket) → `203.0.113.7` */
export function plainAddress(address: string): string {
  return address.startsWith('::ffff:') && net.isIPv4(address.slice(7)) ? address.slice(7) : address;
}
