// Regression: a CA that forgets the ACME account (pebble keeps accounts in memory, so a restart does)
// left every later order failing with accountDoesNotExist until Portico restarted: the issuer kept
// its registered client forever. Now the failing order drops the account, registers again (same key)
// and is tried once more at once.
//
// The "restart": the issuer's directory URL is a TCP relay in front of a first pebble, then in front
// of a second one (the first stopped). pebble builds its URLs from the Host header, so every URL the
// issuer holds (directory, account, orders) stays valid, as on a restart on the same port.
import t from 'tap';
import http from 'node:http';
import net from 'node:net';
import { X509Certificate } from 'node:crypto';
import { createAcmeIssuer, IssueError, type AccountKeyStore, type ChallengeStore } from '../../src/certs/acme-issuer.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startPebble } from '../helpers/pebble.ts';

const keyAuthorizations = new Map<string, string>();
const listener = http.createServer((req, res) => {
  const answer = keyAuthorizations.get((req.url ?? '').split('/').pop() ?? '');
  res.statusCode = answer === undefined ? 404 : 200;
  res.end(answer);
});
await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
t.teardown(() => listener.close());
const httpPort = (listener.address() as { port: number }).port;

const dns = await startChalltestsrv();
t.teardown(() => dns.stop());
await dns.addA('first.example.com', ['127.0.0.1']);
await dns.addA('second.example.com', ['127.0.0.1']);
await dns.addA('third.example.com', ['127.0.0.1']);
const before = await startPebble({ httpPort, dnsServer: dns.dnsServer });
t.teardown(() => before.stop());
const after = await startPebble({ httpPort, dnsServer: dns.dnsServer });
t.teardown(() => after.stop());

// the relay: every new connection goes to the pebble `target` names at that moment
let target = new URL(before.directoryUrl);
const sockets = new Set<net.Socket>();
const relay = net.createServer((client) => {
  const server = net.connect(Number(target.port), target.hostname);
  for (const socket of [client, server]) {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => { client.destroy(); server.destroy(); });
  }
  client.pipe(server).pipe(client);
});
await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
t.teardown(() => {
  for (const socket of sockets) socket.destroy();
  relay.close();
});
const directoryUrl = `https://127.0.0.1:${(relay.address() as { port: number }).port}/dir`;

const challenges: ChallengeStore = {
  async set(token, keyAuthorization) { keyAuthorizations.set(token, keyAuthorization); },
  async remove(token) { keyAuthorizations.delete(token); },
};
let accountPem: string | null = null;
let saves = 0;
const accountKeys: AccountKeyStore = {
  async load() { return accountPem; },
  async save(value) { saves += 1; accountPem = value; },
};
const issuer = createAcmeIssuer({ directoryUrl, email: 'ops@example.com', accountKeys, challenges, ca: before.caCertPem + after.caCertPem });

const subject = (certPem: string) => new X509Certificate(certPem).subjectAltName;

t.test('account-forgotten: the CA restarted between two orders; the second registers again and issues', async (t) => {
  const first = await issuer.issue('first.example.com');
  t.equal(subject(first.certPem), 'DNS:first.example.com');
  t.equal(before.orders(), 1);

  // the CA restarts: same address, no memory of the account
  target = new URL(after.directoryUrl);
  for (const socket of sockets) socket.destroy();
  await before.stop();

  let second;
  try {
    second = await issuer.issue('second.example.com');
  } catch (err) {
    t.fail(`the order after the restart failed: ${err instanceof IssueError ? `${err.problemType} ${err.message}` : String(err)}`);
    return;
  }
  t.equal(subject(second.certPem), 'DNS:second.example.com', 'issued within the same issue() call');
  t.equal(after.orders(), 1, 'one order at the restarted CA: the refused attempt created none');
  t.equal(saves, 1, 'the same account key, registered again');

  const third = await issuer.issue('third.example.com');
  t.equal(subject(third.certPem), 'DNS:third.example.com', 'later orders use the new registration');
  t.equal(after.orders(), 2);
});
