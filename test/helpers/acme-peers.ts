// The peers of an end-to-end certificate test: challtestsrv as the DNS, an upstream for the project,
// pebble validating HTTP-01 on a free port that Portico's HTTP listener takes, and the CNAME target
// `edge.localhost` at this machine (where the CA's validation lands). `env` is what a Portico needs to
// order from this pebble. Everything stops at the end of `owner`.
import tls from 'node:tls';
import { startChalltestsrv } from './challtestsrv.ts';
import { startPebble } from './pebble.ts';
import { startUpstream } from './upstream.ts';
import { freePort } from './free-port.ts';

export async function startAcmePeers(owner: { teardown(fn: () => unknown): void }) {
  const dns = await startChalltestsrv();
  owner.teardown(() => dns.stop());
  const upstream = await startUpstream();
  owner.teardown(() => upstream.stop());
  const httpPort = await freePort();
  const pebble = await startPebble({ httpPort, dnsServer: dns.dnsServer });
  owner.teardown(() => pebble.stop());
  await dns.addA('edge.localhost', ['127.0.0.1']);
  const env = {
    PORTICO_HTTP_PORT: String(httpPort),
    PORTICO_DNS_SERVERS: dns.dnsServer,
    PORTICO_ACME_DIRECTORY: pebble.directoryUrl,
    NODE_EXTRA_CA_CERTS: pebble.caCertFile,
  };
  return { dns, upstream, pebble, httpPort, env };
}

/** Whether a handshake for `servername` gets a certificate that verifies against `root` (pebble's). */
export function servedTrusted(port: number, servername: string, root: string): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, servername, ca: root }, () => {
      resolve(socket.authorized);
      socket.end();
    });
    socket.on('error', reject);
  });
}
