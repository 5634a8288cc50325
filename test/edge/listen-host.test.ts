// PORTICO_LISTEN_HOST (DESIGN §2): the HTTP and HTTPS listeners bind the address asked for, every
// interface when unset, and a bad value stops the start with one message.
import t, { type Test } from 'tap';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { startPortico, baseEnv, cleanup } from '../helpers/portico.ts';
import { request } from '../helpers/client.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const CLI = path.join(ROOT, 'src/cli/main.ts');

/** connects to address:port; 'open' or the error code (ECONNREFUSED when nothing listens there) */
function probe(address: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: address, port });
    socket.once('connect', () => {
      socket.destroy();
      resolve('open');
    });
    socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

const hasIpv6Loopback = Object.values(os.networkInterfaces()).some((list) => list?.some((i) => i.family === 'IPv6' && i.address === '::1'));

t.test('unset: every interface, as before', async (t) => {
  const portico = await startPortico();
  t.teardown(() => portico.stop());
  const { https, http } = portico.running.listeners.addresses();
  t.ok(['::', '0.0.0.0'].includes(https.address), `HTTPS on the unspecified address (${https.address})`);
  t.ok(['::', '0.0.0.0'].includes(http.address), `HTTP on the unspecified address (${http.address})`);
  t.equal(await probe('127.0.0.1', https.port), 'open');
  if (hasIpv6Loopback) t.equal(await probe('::1', https.port), 'open', 'IPv6 loopback reaches it too');
});

t.test('127.0.0.1: only IPv4 loopback', async (t) => {
  const portico = await startPortico({ PORTICO_LISTEN_HOST: '127.0.0.1' });
  t.teardown(() => portico.stop());
  const { https, http } = portico.running.listeners.addresses();
  t.same([https.address, https.family], ['127.0.0.1', 'IPv4'], 'HTTPS bound to 127.0.0.1');
  t.same([http.address, http.family], ['127.0.0.1', 'IPv4'], 'HTTP bound to 127.0.0.1');
  t.equal(portico.running.listeners.ports().https, https.port);
  const answer = await request(https.port, 'unknown.localhost', portico.ca, { identity: 'localhost' });
  t.equal(answer.status, 404, 'serves on 127.0.0.1');
  if (hasIpv6Loopback) {
    t.equal(await probe('::1', https.port), 'ECONNREFUSED', 'HTTPS not reachable on ::1');
    t.equal(await probe('::1', http.port), 'ECONNREFUSED', 'HTTP not reachable on ::1');
  }
});

t.test('::1 (and [::1]): only IPv6 loopback', { skip: hasIpv6Loopback ? false : 'this machine has no IPv6 loopback' }, async (t) => {
  const portico = await startPortico({ PORTICO_LISTEN_HOST: '[::1]' });
  t.teardown(() => portico.stop());
  const { https, http } = portico.running.listeners.addresses();
  t.same([https.address, https.family], ['::1', 'IPv6'], 'HTTPS bound to ::1');
  t.same([http.address, http.family], ['::1', 'IPv6'], 'HTTP bound to ::1');
  t.equal(await probe('::1', https.port), 'open');
  t.equal(await probe('127.0.0.1', https.port), 'ECONNREFUSED', 'HTTPS not reachable on 127.0.0.1');
  t.equal(await probe('127.0.0.1', http.port), 'ECONNREFUSED', 'HTTP not reachable on 127.0.0.1');
});

t.test(':: binds every interface explicitly', { skip: hasIpv6Loopback ? false : 'this machine has no IPv6' }, async (t) => {
  const portico = await startPortico({ PORTICO_LISTEN_HOST: '::' });
  t.teardown(() => portico.stop());
  const { https } = portico.running.listeners.addresses();
  t.equal(https.address, '::');
  t.equal(await probe('::1', https.port), 'open');
  t.equal(await probe('127.0.0.1', https.port), 'open', 'IPv4 arrives mapped');
});

function serve(t: Test, variables: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env = baseEnv(variables);
  t.teardown(() => cleanup(env.PORTICO_DATA_DIR, env.PORTICO_CERTS_DIR));
  const clean = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('PORTICO_')));
  const child = spawn(process.execPath, [CLI, 'serve'], { env: { ...clean, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c) => (stdout += c));
  child.stderr.on('data', (c) => (stderr += c));
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  return new Promise((resolve) => {
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

t.test('a value that is not an IP address stops the start with one message', async (t) => {
  const outcome = await serve(t, { PORTICO_LISTEN_HOST: 'localhost:8443' });
  t.equal(outcome.code, 2, `exit code 2 (stderr: ${outcome.stderr})`);
  t.match(outcome.stderr, /listen\.host \(PORTICO_LISTEN_HOST\) must be an IP address .*got "localhost:8443"/);
  t.equal(outcome.stderr.trim().split('\n').length, 2, 'one problem under the heading');
  t.notMatch(outcome.stdout, /Portico listening/, 'never listened');
});

t.test('an address this machine does not have stops the start naming the listener', async (t) => {
  // TEST-NET-1 (RFC 5737): never assigned to a local interface
  const outcome = await serve(t, { PORTICO_LISTEN_HOST: '192.0.2.1' });
  t.equal(outcome.code, 1, `exit code 1 (stderr: ${outcome.stderr})`);
  t.match(outcome.stderr, /^portico: the https listener cannot bind 192\.0\.2\.1:0: listen EADDRNOTAVAIL/m);
  t.notMatch(outcome.stdout, /Portico listening/, 'never listened');
});
