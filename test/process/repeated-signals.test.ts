// A second SIGTERM or SIGINT while Portico is stopping changes nothing. Under systemd
// (KillMode=control-group) every process of the unit gets SIGTERM and the primary forwards its own to
// each worker; a terminal's Ctrl-C sends SIGINT to all of them. With `process.once` the second signal
// took Node's default action: the requests in flight were cut, and the primary still exited 0 (it
// now exits 1 when a worker did not stop cleanly).
import t, { type Test } from 'tap';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { spawnPortico, killAll, cleanup, alive, type Child } from '../helpers/portico.ts';
import { api, accountWithKey } from '../helpers/client.ts';
import { freePort } from '../helpers/free-port.ts';
import { startRedis } from '../helpers/redis.ts';

const IN_FLIGHT = 4;
const UPSTREAM_MS = 2_000;

interface Entry {
  msg?: string;
  pid?: number;
  status?: number;
  [field: string]: unknown;
}

const entries = (child: Child): Entry[] =>
  child.logs.flatMap((line) => {
    try {
      return [JSON.parse(line) as Entry];
    } catch {
      return [];
    }
  });

async function until<T>(what: string, check: () => T | undefined | false, child: Child, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}:\n${child.logs.slice(-20).join('\n')}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The API's upstream: answers /v1/pets/<id> after UPSTREAM_MS, and counts the requests it got. */
async function slowUpstream(t: Test): Promise<{ url: string; readonly hits: number }> {
  let hits = 0;
  const server = http.createServer((req, res) => {
    hits++;
    const timer = setTimeout(() => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ id: req.url!.split('/').pop(), name: 'Rex' }));
    }, UPSTREAM_MS);
    res.once('close', () => clearTimeout(timer));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get hits() {
      return hits;
    },
  };
}

/**
 * IN_FLIGHT requests, each on its own connection, sent and held by the slow upstream once this
 * resolves; `answers`: their statuses (or errors).
 */
async function inFlight(child: Child, upstream: { hits: number }): Promise<{ answers: Promise<Array<number | string>> }> {
  const { key } = await accountWithKey(child.ports.admin, 'pro');
  const before = upstream.hits;
  const answers = Promise.all(
    Array.from({ length: IN_FLIGHT }, (_, i) =>
      api(child.ports.https, child.ca, key, { path: `/v1/pets/${i}` }).then((a) => a.status, (err: NodeJS.ErrnoException) => err.code ?? err.message),
    ),
  );
  await until('every request at the upstream', () => upstream.hits - before >= IN_FLIGHT, child);
  return { answers };
}


/** The exit code, or a failure if the process is still running after `ms` (then it is killed). */
async function exitOf(child: Child, ms = 20_000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  const timer = setTimeout(() => child.process.kill('SIGKILL'), ms);
  const code = await child.exited;
  clearTimeout(timer);
  return { code, signal: child.process.signalCode };
}

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  t.test(`one process: ${signal} twice, 100 ms apart, still finishes the requests in flight and exits 0`, async (t) => {
    const upstream = await slowUpstream(t);
    const child = await spawnPortico({ PORTICO_API_UPSTREAM: upstream.url });
    t.teardown(async () => {
      await child.kill('SIGKILL');
      cleanup(child.env.PORTICO_DATA_DIR, child.env.PORTICO_CERTS_DIR);
    });
    const { answers } = await inFlight(child, upstream);

    child.process.kill(signal);
    await new Promise((resolve) => setTimeout(resolve, 100));
    child.process.kill(signal);

    t.same(await answers, Array(IN_FLIGHT).fill(200), `all ${IN_FLIGHT} requests in flight answered 200`);
    const { code, signal: killedBy } = await exitOf(child);
    t.equal(killedBy, null, 'not killed by the second signal');
    t.equal(code, 0, 'exit code 0');
    const log = entries(child);
    t.ok(log.some((e) => e.msg === 'stopped'), 'logs that it stopped');
    t.equal(log.filter((e) => e.msg === 'already stopping' && e.signal === signal).length, 1, `the second ${signal} is noted once`);
    t.equal(log.filter((e) => e.msg === 'request' && e.status === 200).length, IN_FLIGHT, 'an access line for each request');
  });
}

/** `portico serve --workers 2` on Redis: the child, and its two workers' pids. */
async function startCluster(t: Test, upstreamUrl: string): Promise<{ child: Child; workers: number[] }> {
  const redis = await startRedis();
  // the workers share the listening sockets: with port 0 each would bind a different one
  const env = {
    PORTICO_REDIS_URL: redis.url,
    PORTICO_API_UPSTREAM: upstreamUrl,
    PORTICO_HTTPS_PORT: String(await freePort()),
    PORTICO_HTTP_PORT: String(await freePort()),
    PORTICO_ADMIN_PORT: String(await freePort()),
  };
  const child = await spawnPortico(env, ['--workers', '2']);
  const workers: number[] = [];
  t.teardown(async () => {
    await child.kill('SIGKILL');
    killAll(workers);
    await redis.stop();
    cleanup(child.env.PORTICO_DATA_DIR, child.env.PORTICO_CERTS_DIR);
  });
  const listening = await until('two "Portico listening" lines', () => {
    const lines = entries(child).filter((e) => e.msg?.startsWith('Portico listening'));
    return lines.length >= 2 && lines;
  }, child);
  workers.push(...listening.map((e) => e.pid!));
  return { child, workers };
}

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  t.test(`--workers 2: ${signal} to every process (and the primary's SIGTERM to each worker), then once more: the requests in flight finish, exit 0`, async (t) => {
    const upstream = await slowUpstream(t);
    const { child, workers } = await startCluster(t, upstream.url);
    t.equal(new Set(workers).size, 2, 'two workers');
    const { answers } = await inFlight(child, upstream);

    // as systemd's stop (SIGTERM) or a terminal's Ctrl-C (SIGINT) does: every process of the group.
    // The primary's comes once both workers are stopping: two SIGTERMs pending at once in a worker
    // would be merged into one by the kernel, and the test would not see the second.
    for (const pid of workers) process.kill(pid, signal);
    await until('both workers stopping', () => workers.every((pid) => entries(child).some((e) => e.pid === pid && e.signal === signal && e.msg?.startsWith('stopping'))), child, 5_000);
    process.kill(child.process.pid!, signal);
    // then, once the workers have the primary's SIGTERM (or died of it), a second Ctrl-C or stop to every process
    const forwarded = (pid: number) => !alive(pid) || entries(child).some((e) => e.pid === pid && e.msg === 'already stopping');
    await until('the primary\'s SIGTERM at each worker', () => workers.every(forwarded), child, 5_000);
    // a worker that held no request in flight may have stopped and exited already (the kernel spreads
    // the connections as it likes): it gets no second signal, and may have exited before the primary's
    const secondTo = [child.process.pid!, ...workers].filter(alive);
    for (const pid of secondTo) process.kill(pid, signal);

    t.same(await answers, Array(IN_FLIGHT).fill(200), `all ${IN_FLIGHT} requests in flight answered 200`);
    const { code, signal: killedBy } = await exitOf(child);
    t.equal(killedBy, null, 'the primary was not killed by a signal');
    t.equal(code, 0, 'the primary exits 0');
    const log = entries(child);
    for (const pid of workers) t.ok(log.some((e) => e.pid === pid && e.msg === 'stopped'), `worker ${pid} finished its graceful stop`);
    for (const pid of workers) {
      const noted = log.filter((e) => e.pid === pid && e.msg === 'already stopping').map((e) => e.signal);
      if (secondTo.includes(pid)) t.same(noted, ['SIGTERM', signal], `worker ${pid} noted the primary's SIGTERM and the second ${signal}, and acted on neither`);
      else t.ok(noted.length <= 1 && noted.every((s) => s === 'SIGTERM'), `worker ${pid} had exited before the second ${signal} (noted: ${noted.join(', ') || 'nothing'})`);
    }
    t.ok(log.some((e) => e.pid === child.process.pid && e.msg === 'already stopping' && e.signal === signal), `the primary noted the second ${signal}`);
    t.notOk(log.some((e) => e.msg === 'a worker did not stop cleanly'), 'no worker ended badly');
    t.equal(log.filter((e) => e.msg === 'request' && e.status === 200).length, IN_FLIGHT, 'an access line for each request');
  });
}

t.test('--workers 2: a worker killed during the stop makes the primary exit 1, and the log says which', async (t) => {
  const upstream = await slowUpstream(t);
  const { child, workers } = await startCluster(t, upstream.url);
  const { answers } = await inFlight(child, upstream);

  child.process.kill('SIGTERM');
  await until('the primary stopping', () => entries(child).some((e) => e.msg === 'stopping all workers'), child);
  // a worker with nothing in flight may be gone already; one holding requests is not (the upstream takes 2 s)
  const victim = workers.find(alive)!;
  const survivor = workers.find((pid) => pid !== victim)!;
  process.kill(victim, 'SIGKILL');

  await answers;
  const { code, signal } = await exitOf(child);
  t.equal(signal, null, 'the primary exited by itself');
  t.equal(code, 1, 'exit code 1: the stop was not clean');
  const log = entries(child);
  t.ok(log.some((e) => e.msg === 'a worker did not stop cleanly' && e.workerPid === victim && e.signal === 'SIGKILL'), 'names the killed worker and the signal');
  t.notOk(log.some((e) => e.msg === 'a worker did not stop cleanly' && e.workerPid === survivor), 'not the one that stopped gracefully');
  t.ok(log.some((e) => e.pid === survivor && e.msg === 'stopped'), 'the other worker finished its graceful stop');
});
