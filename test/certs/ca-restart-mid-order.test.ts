// Regression: the CA restarted while an order waited for its HTTP-01 validation. The restarted CA
// (pebble keeps accounts and orders in memory) refuses every poll of the old order, but those polls
// went on with acme-client's backoff (10 looks, up to 30 s apart): the domain stayed `pending` about
// 90 s before the account was registered again and the order placed once more, and the timeline
// showed two `order_placed` with nothing between. Now the CA's refusal ends the wait at once, the
// second order follows within seconds, and the failed attempt is an `order_failed` event and a warn line.
//
// The restart: Portico's ACME directory is a TCP relay in front of a first pebble, then of a second
// one (the first killed), as in account-forgotten.test.ts. The order is caught mid-validation by a
// gate in front of Portico's HTTP listener that holds the CA's first validation requests unanswered;
// once the CA has restarted, the gate relays to Portico.
import t from 'tap';
import net from 'node:net';
import path from 'node:path';
import { writeFileSync } from 'node:fs';
import { startPortico, tempDir, cleanup } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startPebble } from '../helpers/pebble.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { freePort } from '../helpers/free-port.ts';
import { admin } from '../helpers/client.ts';

const dns = await startChalltestsrv();
t.teardown(() => dns.stop());
const upstream = await startUpstream();
t.teardown(() => upstream.stop());
await dns.addA('edge.localhost', ['127.0.0.1']);

const edgeHttpPort = await freePort();
let holding = true;
let validationArrived: () => void;
const arrived = new Promise<void>((resolve) => { validationArrived = resolve; });
const open = new Set<net.Socket>();
const gate = net.createServer((socket) => {
  open.add(socket);
  socket.on('close', () => open.delete(socket));
  socket.on('error', () => socket.destroy());
  if (holding) {
    validationArrived();
    return;
  }
  const edge = net.connect(edgeHttpPort, '127.0.0.1');
  open.add(edge);
  edge.on('close', () => open.delete(edge));
  edge.on('error', () => socket.destroy());
  socket.pipe(edge).pipe(socket);
});
await new Promise<void>((resolve) => gate.listen(0, '127.0.0.1', resolve));
const gatePort = (gate.address() as net.AddressInfo).port;
t.teardown(() => {
  for (const socket of open) socket.destroy();
  gate.close();
});

const before = await startPebble({ httpPort: gatePort, dnsServer: dns.dnsServer });
t.teardown(() => before.stop());
const after = await startPebble({ httpPort: gatePort, dnsServer: dns.dnsServer });
t.teardown(() => after.stop());

let target = new URL(before.directoryUrl);
const relayed = new Set<net.Socket>();
// when bytes last went through the relay: the restart waits for a quiet moment between Portico's polls
let lastActivity = 0;
const relay = net.createServer((client) => {
  const server = net.connect(Number(target.port), target.hostname);
  for (const socket of [client, server]) {
    relayed.add(socket);
    socket.on('close', () => relayed.delete(socket));
    socket.on('error', () => { client.destroy(); server.destroy(); });
    socket.on('data', () => (lastActivity = Date.now()));
  }
  client.pipe(server).pipe(client);
});
await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
t.teardown(() => {
  for (const socket of relayed) socket.destroy();
  relay.close();
});

const trustDir = tempDir('ca-restart');
t.teardown(() => cleanup(trustDir));
const trust = path.join(trustDir, 'pebbles.pem');
writeFileSync(trust, before.caCertPem + after.caCertPem);

const portico = await startPortico({
  PORTICO_HTTP_PORT: String(edgeHttpPort),
  PORTICO_DNS_SERVERS: dns.dnsServer,
  PORTICO_ACME_DIRECTORY: `https://127.0.0.1:${(relay.address() as net.AddressInfo).port}/dir`,
  NODE_EXTRA_CA_CERTS: trust,
});
t.teardown(() => portico.stop());

interface Event { type: string; message: string; details?: Record<string, unknown> }

t.test('ca-restart-mid-order: the restarted CA refuses the old order; a new one is placed at once and issues', async (t) => {
  const { ports } = portico;
  const account = (await admin(ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const project = (await admin(ports.admin, 'POST', '/admin/projects', { accountId: account.id, name: 'restart', upstream: upstream.url })).json;
  const hostname = 'mid.example.com';
  const domainPath = `/admin/projects/${project.id}/domains/${hostname}`;
  await admin(ports.admin, 'POST', `/admin/projects/${project.id}/domains`, { hostname });
  await dns.setCname(hostname, 'edge.localhost');
  t.equal((await admin(ports.admin, 'POST', `${domainPath}/verify`)).json.status, 'verified');

  // the order is with the CA, which is validating: restart it
  let late: NodeJS.Timeout | undefined;
  await Promise.race([arrived, new Promise((_, reject) => { late = setTimeout(() => reject(new Error(`no validation came:\n${before.log().slice(-2000)}`)), 20_000); })]);
  clearTimeout(late);
  // A poll cut in the middle fails as "could not reach the CA" and waits out the first backoff (a
  // minute), which is not what this test is about: seen once in a loaded full run. The CA goes away
  // between two requests, as a restart mostly does
  const quietFrom = Date.now();
  while (Date.now() - lastActivity < 150 && Date.now() - quietFrom < 5_000) await new Promise((r) => setTimeout(r, 20));
  target = new URL(after.directoryUrl);
  for (const socket of relayed) socket.destroy();
  await before.stop();
  for (const socket of open) socket.destroy();
  holding = false;
  const restarted = Date.now();

  // about 90 s before the fix; seconds after it (the bound leaves room for a loaded machine)
  let certificate: { status: string } = { status: 'none' };
  while (Date.now() - restarted < 45_000) {
    certificate = (await admin(ports.admin, 'GET', domainPath)).json.certificate;
    if (certificate.status === 'issued') break;
    await new Promise((r) => setTimeout(r, 200));
  }
  t.equal(certificate.status, 'issued', `issued ${((Date.now() - restarted) / 1000).toFixed(1)} s after the restart`);
  t.equal(after.orders(), 1, 'one order at the restarted CA');

  const events = (await admin(ports.admin, 'GET', `${domainPath}/events`)).json as Event[];
  const steps = events.map((e) => e.type).filter((type) => ['order_placed', 'order_failed', 'certificate_issued'].includes(type));
  t.same(steps, ['order_placed', 'order_failed', 'order_placed', 'certificate_issued'], 'the failed attempt is on the timeline, between the two orders');
  const failed = events.find((e) => e.type === 'order_failed');
  t.match(failed?.message, /no longer knows Portico's ACME account/);
  t.match(failed?.details, { retrying: true, problemType: /accountDoesNotExist$/ });
  const warned = portico.logs.map((line) => JSON.parse(line)).filter((entry) => entry.level === 40 && entry.hostname === hostname);
  t.ok(warned.some((entry) => entry.msg === 'an issuer could not issue' && entry.retrying === true), 'and a warn line');
});
