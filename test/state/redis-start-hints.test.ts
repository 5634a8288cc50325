// Regression: a start that could not use the Redis PORTICO_REDIS_URL names said what Redis or Node said,
// not what to change, on real redis-servers and real Portico processes (`portico serve --workers 1`):
// - redis:// to a port that speaks only TLS stopped with `read ECONNRESET` alone; it now says the server
//   seems to expect TLS (rediss://);
// - a server with requirepass and a URL without a password stopped with Redis's `NOAUTH HELLO must be
//   called with the client already authenticated, …`; it now says the URL needs the user and password;
// - a certificate no trusted CA signed stopped with Node's words alone (a private CA: `self-signed
//   certificate in certificate chain`) or with Node's advice to run with --use-system-ca (a self-signed
//   one), which cannot help with a CA no system store holds; it now names NODE_EXTRA_CA_CERTS=<ca file>
//   (README *Configuration*), and that makes the next start work.
// A wrong password (WRONGPASS) and a refused connection (ECONNREFUSED) already said why: pinned here.
// NOAUTH, WRONGPASS and a certificate that cannot be verified stopped the start only after its whole
// 5 s wait for Redis: they stop it at once.
// A database index the server does not have (`redis://…/99`) started Portico on database 0: it stops.
// The password never appears in what a start prints.
import http from 'node:http';
import t, { type Test } from 'tap';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { baseEnv, cleanup, spawnPortico, startPortico } from '../helpers/portico.ts';
import { startRedis } from '../helpers/redis.ts';
import { freePort } from '../helpers/free-port.ts';

const run = promisify(execFile);
const CLI = path.resolve(import.meta.dirname, '../../src/cli/main.ts');
const PASSWORD = 'h1nts:P@ss/%z';

interface Refusal {
  code: number | null;
  stderr: string;
  stdout: string;
  /** from spawn to exit */
  ms: number;
}

/** a start with `url` that must fail: its exit code and its output */
async function refusedStart(url: string, extra: Record<string, string> = {}): Promise<Refusal> {
  const env = baseEnv({ PORTICO_REDIS_URL: url, ...extra });
  // the process's own NODE_EXTRA_CA_CERTS (if any) holds none of this file's certificates
  const full = { ...process.env, NODE_EXTRA_CA_CERTS: process.env.NODE_EXTRA_CA_CERTS ?? '', ...env };
  const started = performance.now();
  return run(process.execPath, [CLI, 'serve', '--workers', '1'], { env: full, timeout: 30_000 })
    .then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr, ms: performance.now() - started }),
      (err: { code?: number; killed?: boolean; stdout: string; stderr: string }) => ({ code: err.killed ? null : (err.code ?? null), stdout: err.stdout, stderr: err.stderr, ms: performance.now() - started }),
    )
    .finally(() => cleanup(env.PORTICO_DATA_DIR, env.PORTICO_CERTS_DIR));
}

/** the one line that says why the start stopped */
function reason(t: Test, refusal: Refusal): string {
  t.equal(refusal.code, 1, `exit code 1; stderr: ${refusal.stderr}`);
  const lines = refusal.stderr.split('\n').filter((line) => line.startsWith('portico: state backend unavailable'));
  t.equal(lines.length, 1, `one line says why (${refusal.stderr.trim()})`);
  t.notMatch(refusal.stdout, /Portico listening/, 'never listened');
  const all = refusal.stdout + refusal.stderr;
  for (const secret of [PASSWORD, encodeURIComponent(PASSWORD)]) t.notOk(all.includes(secret), 'no password anywhere in its output');
  return lines[0] ?? '';
}

t.test('redis:// to a port that speaks only TLS: the line says the server seems to expect TLS', async (t) => {
  const redis = await startRedis({ tls: true });
  t.teardown(() => redis.stop());
  const line = reason(t, await refusedStart(`redis://127.0.0.1:${redis.port}`));
  t.match(line, /^portico: state backend unavailable: (read|write) ECONNRESET \(the server reset the connection without answering: it seems to expect TLS, rediss:\/\/…\); the start stops$/);
});

t.test('a server with a password, a URL without one: the line says the URL needs the user and password', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  await run('redis-cli', ['-p', String(redis.port), 'CONFIG', 'SET', 'requirepass', PASSWORD]);

  t.test('NOAUTH', async (t) => {
    const refusal = await refusedStart(`redis://127.0.0.1:${redis.port}`);
    const line = reason(t, refusal);
    t.ok(refusal.ms < 5000, `stopped without waiting out the 5 s wait for Redis (${refusal.ms.toFixed(0)} ms, process start included)`);
    t.match(line, /^portico: state backend unavailable: NOAUTH /, "Redis's words first");
    t.ok(line.endsWith(' (the server requires a password: PORTICO_REDIS_URL needs the user and password, redis://user:password@host:port); the start stops'), `what to change (${line})`);
  });

  t.test('WRONGPASS: Redis says it, and no hint to add a password that is there', async (t) => {
    const refusal = await refusedStart(`redis://default:${encodeURIComponent('not-' + PASSWORD)}@127.0.0.1:${redis.port}`);
    const line = reason(t, refusal);
    t.ok(refusal.ms < 5000, `stopped without waiting out the 5 s wait for Redis (${refusal.ms.toFixed(0)} ms, process start included)`);
    t.equal(line, 'portico: state backend unavailable: WRONGPASS invalid username-password pair or user is disabled.; the start stops');
  });
});

t.test('a database the server does not have: the start stops (it ran on database 0)', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const line = reason(t, await refusedStart(`redis://127.0.0.1:${redis.port}/99`));
  t.equal(line, 'portico: state backend unavailable: PORTICO_REDIS_URL names database 99, which the server refuses (ERR DB index is out of range); the start stops');
  t.equal((await run('redis-cli', ['-p', String(redis.port), '-n', '0', 'DBSIZE'])).stdout.trim(), '0', 'nothing was written to database 0');

  // one it has: the state is there, and nowhere else
  const portico = await startPortico({ PORTICO_REDIS_URL: `redis://127.0.0.1:${redis.port}/3` });
  try {
    const keys = async (db: number) => Number((await run('redis-cli', ['-p', String(redis.port), '-n', String(db), 'DBSIZE'])).stdout.trim());
    t.ok((await keys(3)) > 0, 'the state is in database 3');
    t.equal(await keys(0), 0, 'and not in database 0');
  } finally {
    await portico.stop();
    cleanup(portico.dataDir, portico.certsDir);
  }
});

t.test('nothing listening: the line carries the cause', async (t) => {
  const port = await freePort();
  const line = reason(t, await refusedStart(`redis://127.0.0.1:${port}`));
  t.equal(line, `portico: state backend unavailable: connect ECONNREFUSED 127.0.0.1:${port}; the start stops`);
});

t.test('rediss:// with a certificate from a private CA: the line names NODE_EXTRA_CA_CERTS, not --use-system-ca', async (t) => {
  const server = await privateCaRedis();
  t.teardown(() => server.stop());
  const url = `rediss://default:${encodeURIComponent(PASSWORD)}@localhost:${server.port}`;
  const refusal = await refusedStart(url);
  t.ok(refusal.ms < 5000, `stopped without waiting out the 5 s wait for Redis (${refusal.ms.toFixed(0)} ms, process start included)`);
  const line = reason(t, refusal);
  t.match(line, /^portico: state backend unavailable: [^(]*certificate[^(]* \(the server's certificate is not trusted: give Portico the CA that signed it with NODE_EXTRA_CA_CERTS=<ca file>\); the start stops$/);
  t.notMatch(line, /--use-system-ca/, "not Node's advice for a CA in the system's store");

  // the advice works: the same URL with the CA's file in NODE_EXTRA_CA_CERTS starts
  const portico = await spawnPortico({ PORTICO_REDIS_URL: url, NODE_EXTRA_CA_CERTS: server.caFile }, ['--workers', '1']);
  t.teardown(() => cleanup(portico.env.PORTICO_DATA_DIR, portico.env.PORTICO_CERTS_DIR));
  t.ok(portico.logs.some((l) => l.includes('state in Redis')), 'it started with its state in Redis');
  t.notOk(portico.logs.join('\n').includes(PASSWORD), 'no password in its log');
  await portico.kill('SIGKILL');
});

t.test("rediss:// with a self-signed certificate: NODE_EXTRA_CA_CERTS in place of Node's --use-system-ca", async (t) => {
  const redis = await startRedis({ tls: true });
  t.teardown(() => redis.stop());
  const refusal = await refusedStart(redis.url);
  t.ok(refusal.ms < 5000, `stopped without waiting out the 5 s wait for Redis (${refusal.ms.toFixed(0)} ms, process start included)`);
  const line = reason(t, refusal);
  t.equal(line, "portico: state backend unavailable: self-signed certificate (the server's certificate is not trusted: give Portico the CA that signed it with NODE_EXTRA_CA_CERTS=<ca file>); the start stops");
});

t.test('redis:// to a port where an HTTP server answers: the line says the port does not speak Redis, at once', async (t) => {
  const server = http.createServer((_req, res) => res.end('not redis'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const refusal = await refusedStart(`redis://127.0.0.1:${(server.address() as net.AddressInfo).port}`);
  t.ok(refusal.ms < 5000, `stopped without waiting out the 5 s wait for Redis (${refusal.ms.toFixed(0)} ms, process start included)`);
  const line = reason(t, refusal);
  t.match(line, /\(the server at that port does not speak Redis: is PORTICO_REDIS_URL's port Redis's\?\); the start stops$/);
  t.notMatch(line, /Please report this/, "not the client's request for a bug report");
});

/** a TLS-only redis-server with a password, its certificate (localhost, 127.0.0.1) signed by a CA of its own */
async function privateCaRedis(): Promise<{ port: number; caFile: string; stop(): Promise<void> }> {
  const dir = mkdtempSync(path.join(tmpdir(), 'portico-hints-'));
  const file = (name: string) => path.join(dir, name);
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  await run('openssl', ['req', '-x509', ...ec, '-keyout', file('ca.key'), '-out', file('ca.pem'), '-days', '1', '-subj', '/CN=Portico test private CA']);
  await run('openssl', ['req', ...ec, '-keyout', file('server.key'), '-out', file('server.csr'), '-subj', '/CN=localhost']);
  writeFileSync(file('server.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  await run('openssl', ['x509', '-req', '-in', file('server.csr'), '-CA', file('ca.pem'), '-CAkey', file('ca.key'), '-CAcreateserial', '-out', file('server.pem'), '-days', '1', '-extfile', file('server.ext')]);
  const port = await freePort();
  const child: ChildProcess = spawn('redis-server', ['--port', '0', '--tls-port', String(port), '--tls-cert-file', file('server.pem'), '--tls-key-file', file('server.key'), '--tls-ca-cert-file', file('ca.pem'), '--tls-auth-clients', 'no', '--requirepass', PASSWORD, '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    child.kill('SIGKILL');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  for (let deadline = Date.now() + 10_000; !(await listening(port)); ) {
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`redis-server did not listen on ${port}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { port, caFile: file('ca.pem'), stop };
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}
