// A hand-made HTTP/1.1 upstream on loopback, for answers no HTTP library would send, and a Portico in
// this process with a project on it, reached by the project's default hostname over TLS with SNI.
import type { Test } from 'tap';
import net from 'node:net';
import tls from 'node:tls';
import type { AddressInfo } from 'node:net';
import { startPortico, type Instance } from './portico.ts';
import { accountWithKey, admin } from './client.ts';

/** called for each request once its head is read (bodies are not read), with the connection to answer on */
export type RawAnswer = (path: string, socket: net.Socket) => void;

export interface RawUpstreamBed {
  portico: Instance;
  /** the project's default hostname */
  hostname: string;
  /** the project's account (pro) */
  accountId: string;
  /** the fallback certificate's *.localhost does not satisfy Node's identity check: trust it by its CA, check it as localhost */
  identity(name: string, cert: tls.PeerCertificate): Error | undefined;
  /** upstream connections closed so far */
  closed(): number;
}

export async function rawUpstreamBed(t: Test, project: string, answer: RawAnswer, env: Record<string, string> = {}): Promise<RawUpstreamBed> {
  const sockets = new Set<net.Socket>();
  let closed = 0;
  const upstream = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.once('close', () => {
      sockets.delete(socket);
      closed++;
    });
    let buffered = '';
    socket.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('latin1');
      for (let end = buffered.indexOf('\r\n\r\n'); end !== -1; end = buffered.indexOf('\r\n\r\n')) {
        const path = buffered.slice(0, end).split(' ')[1];
        buffered = buffered.slice(end + 4);
        answer(path, socket);
      }
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const portico = await startPortico(env);
  t.teardown(async () => {
    await portico.stop();
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => upstream.close(resolve));
  });
  const owner = await accountWithKey(portico.ports.admin);
  const made = await admin(portico.ports.admin, 'POST', '/admin/projects', { accountId: owner.accountId, name: project, upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` });
  return { portico, hostname: made.json.defaultDomain, accountId: owner.accountId, identity: (_name, cert) => tls.checkServerIdentity('localhost', cert), closed: () => closed };
}
