// PORTICO_LISTEN_HOST (DESIGN §2): the HTTP and HTTPS listeners bind the address asked for, every
// interface when unset, and a bad value stops the start with one message.
import t, { type Test } from 'tap';
import http from 'node:http';
import tls from 'node:tls';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parseConfig } from '../../src/config.ts';
import { startPortico, baseEnv, cleanup } from '../helpers/portico.ts';
import { request } from '../helpers/client.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const CLI = path.join(ROOT, 'src/cli/main.ts');

// Another process on this machine may hold the same port number on the other address, so "not
// reachable" is asked as "not this Portico": its HTTPS listener presents this instance's own
// certificate, its HTTP listener redirects to this instance's public port.
const PUBLIC_PORT = '4711';

/** 'portico' when address:port is this instance's HTTPS listener, else why not (ECONNREFUSED, …) */
function https(address: string, port: number, ca: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = tls.connect({ host: address, port, ca, servername: 'localhost', checkServerIdentity: () => undefined });
    socket.once('secureConnect', () => {
      socket.destroy();
      resolve('portico');
    });
    socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

/** 'portico' when address:port is this instance's HTTP listener, else why not */
function plain(address: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const req = http.request({ host: address, port, path: '/probe', headers: { host: 'probe.invalid' } }, (res) => {
      res.resume();
      resolve(res.headers.location === `https://probe.invalid:${PUBLIC_PORT}/probe` ? 'portico' : `other (${res.statusCode})`);
    });
    req.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    req.end();
  });
}

const hasIpv6Loopback = Object.values(os.networkInterfaces()).some((list) => list?.some((i) => i.family === 'IPv6' && i.address === '::1'));

t.test('unset: every interface, as before', async (t) => {
  const portico = await startPortico({ PORTICO_PUBLIC_HTTPS_PORT: PUBLIC_PORT });
  t.teardown(() => portico.stop());
  const bound = portico.running.listeners.addresses();
  t.ok(['::', '0.0.0.0'].includes(bound.https.address), `HTTPS on the unspecified address (${bound.https.address})`);
  t.ok(['::', '0.0.0.0'].includes(bound.http.address), `HTTP on the unspecified address (${bound.http.address})`);
  t.equal(await https('127.0.0.1', bound.https.port, portico.ca), 'portico');
  t.equal(await plain('127.0.0.1', bound.http.port), 'portico');
  if (hasIpv6Loopback) t.equal(await https('::1', bound.https.port, portico.ca), 'portico', 'IPv6 loopback reaches it too');
});

t.test('127.0.0.1: only IPv4 loopback', async (t) => {
  const portico = await startPortico({ PORTICO_LISTEN_HOST: '127.0.0.1', PORTICO_PUBLIC_HTTPS_PORT: PUBLIC_PORT });
  t.teardown(() => portico.stop());
  const bound = portico.running.listeners.addresses();
  t.same([bound.https.address, bound.https.family], ['127.0.0.1', 'IPv4'], 'HTTPS bound to 127.0.0.1');
  t.same([bound.http.address, bound.http.family], ['127.0.0.1', 'IPv4'], 'HTTP bound to 127.0.0.1');
  t.equal(portico.running.listeners.ports().https, bound.https.port);
  const answer = await request(bound.https.port, 'unknown.localhost', portico.ca, { identity: 'localhost' });
  t.equal(answer.status, 404, 'serves on 127.0.0.1');
  t.equal(await plain('127.0.0.1', bound.http.port), 'portico');
  if (hasIpv6Loopback) {
    t.not(await https('::1', bound.https.port, portico.ca), 'portico', 'HTTPS not reachable on ::1');
    t.not(await plain('::1', bound.http.port), 'portico', 'HTTP not reachable on ::1');
  }
});

t.test('::1 (and [::1]): only IPv6 loopback', { skip: hasIpv6Loopback ? false : 'this machine has no IPv6 loopback' }, async (t) => {
  const portico = await startPortico({ PORTICO_LISTEN_HOST: '[::1]', PORTICO_PUBLIC_HTTPS_PORT: PUBLIC_PORT });
  t.teardown(() => portico.stop());
  const bound = portico.running.listeners.addresses();
  t.same([bound.https.address, bound.https.family], ['::1', 'IPv6'], 'HTTPS bound to ::1');
  t.same([bound.http.address, bound.http.family], ['::1', 'IPv6'], 'HTTP bound to ::1');
  t.equal(await https('::1', bound.https.port, portico.ca), 'portico');
  t.equal(await plain('::1', bound.http.port), 'portico');
  t.not(await https('127.0.0.1', bound.https.port, portico.ca), 'portico', 'HTTPS not reachable on 127.0.0.1');
  t.not(await plain('127.0.0.1', bound.http.port), 'portico', 'HTTP not reachable on 127.0.0.1');
});

t.test(':: binds every interface explicitly', { skip: hasIpv6Loopback ? false : 'this machine has no IPv6' }, async (t) => {
  const portico = await startPortico({ PORTICO_LISTEN_HOST: '::' });
  t.teardown(() => portico.stop());
  const bound = portico.running.listeners.addresses();
  t.equal(bound.https.address, '::');
  t.equal(await https('::1', bound.https.port, portico.ca), 'portico');
  t.equal(await https('127.0.0.1', bound.https.port, portico.ca), 'portico', 'IPv4 arrives mapped');
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

t.test('a header deadline later than the request deadline is a configuration problem, not a crash of the listener', async (t) => {
  const yaml = readFileSync(path.join(ROOT, 'config/portico.yaml'), 'utf8').replace('headersMs: 10000', 'headersMs: 2000').replace('requestMs: 60000', 'requestMs: 1000');
  let problems: string[] = [];
  try {
    parseConfig(yaml, 'portico.yaml', {}, ROOT);
  } catch (err) {
    problems = (err as { problems: string[] }).problems;
  }
  t.same(problems, ['timeouts.headersMs (2000) must not exceed timeouts.requestMs (1000)']);
  const equal = parseConfig(yaml.replace('headersMs: 2000', 'headersMs: 1000'), 'portico.yaml', {}, ROOT);
  t.equal(equal.timeouts.headersMs, 1000, 'equal deadlines are fine');
});
