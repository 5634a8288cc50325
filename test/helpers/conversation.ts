// One raw HTTP/1.1 connection whose every byte a test writes: the first bytes at once, more as the
// answer arrives (a next request once the first answer is whole, a body once 100 Continue is read).
// Resolves with everything read, as latin1, once the server closes (or after `ms`).
import net from 'node:net';
import tls from 'node:tls';

export interface Peer {
  port: number;
  /** TLS (ALPN http/1.1) with this SNI; plain TCP without it */
  servername?: string;
  ca?: string | Buffer;
}

/** `more(text)` is asked after each chunk read: the bytes to write next, once */
export function converse(peer: Peer, first: string, more?: (text: string) => string | Buffer | undefined, ms = 3_000): Promise<string> {
  return new Promise((resolve) => {
    const send = () => socket.write(first);
    const socket: net.Socket = peer.servername === undefined
      ? net.connect(peer.port, '127.0.0.1', send)
      : tls.connect({ host: '127.0.0.1', port: peer.port, servername: peer.servername, ca: peer.ca, checkServerIdentity: () => undefined, ALPNProtocols: ['http/1.1'] }, send);
    let text = '';
    let sent = more === undefined;
    const timer = setTimeout(() => socket.destroy(), ms);
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      if (sent) return;
      const next = more!(text);
      if (next === undefined) return;
      sent = true;
      socket.write(next);
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(text);
    });
  });
}

/** after 100 Continue: `body` */
export const afterContinue = (body: string | Buffer) => (text: string) => (text.startsWith('HTTP/1.1 100 Continue\r\n\r\n') ? body : undefined);
