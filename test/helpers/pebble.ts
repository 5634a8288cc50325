// A real ACME CA for tests: pebble (Debian package `pebble`), started on free ports per call.
//
// pebble 2.4.0 ships no certificate for its own HTTPS listener (ACME and management share it), so
// one is made here for localhost/127.0.0.1 (ECDSA P-256; Go's TLS stack serves it) and handed back
// as `caCertPem`/`caCertFile`: pass it to the issuer's `ca` option, or to curl --cacert. TLS
// verification is never turned off.
//
// Its VA resolves names through `dnsServer` (challtestsrv) and fetches HTTP-01 from
// <resolved IP>:httpPort, so `httpPort` is the port of the HTTP listener under test. The issuing
// root and intermediate are new on every start: fetch them with rootPem()/intermediatePem().
//
// pebble has no API that counts orders; orders() counts the `Added order "<id>" to the db` lines
// its WFE logs once per new order (it also logs "There are now N orders in the db").
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { selfSigned } from '../../src/certs/fallback.ts';
import { freePort } from './free-port.ts';

export interface Pebble {
  directoryUrl: string;
  /** the certificate of pebble's own HTTPS listener (ACME and management) */
  caCertFile: string;
  caCertPem: string;
  /** the root that signs issued chains (new on every start) */
  rootPem(): Promise<string>;
  intermediatePem(): Promise<string>;
  /** orders pebble created since it started, counted from its log */
  orders(): number;
  /** pebble's log so far (stdout and stderr), for failure messages */
  log(): string;
  stop(): Promise<void>;
}

const ORDER_LINE = /Added order "[^"]+" to the db/g;

export interface PebbleOptions {
  httpPort: number;
  dnsServer: string;
  /** names pebble refuses to order for (rejectedIdentifier): a CA that says no, for fall-back tests */
  domainBlocklist?: string[];
  /** the lifetime of issued certificates in seconds (pebble's default: about 5 years) */
  certificateValidityPeriod?: number;
  /** External Account Binding required, with these key ids → base64url HMAC keys (RFC 8555 §7.3.4) */
  externalAccountMACKeys?: Record<string, string>;
}

export async function startPebble(options: PebbleOptions): Promise<Pebble> {
  // its ports were free a moment before it started (pebble cannot listen on port 0): another process
  // of the suite may have taken one meanwhile (seen once in a full run); new ports then
  for (let attempt = 1; ; attempt++) {
    try {
      return await startPebbleOnce(options);
    } catch (err) {
      if (attempt === 3 || !/address already in use/.test((err as Error).message)) throw err;
    }
  }
}

async function startPebbleOnce({ httpPort, dnsServer, domainBlocklist, certificateValidityPeriod, externalAccountMACKeys }: PebbleOptions): Promise<Pebble> {
  const dir = mkdtempSync(path.join(tmpdir(), 'portico-pebble-'));
  // never the port it validates against: that one is free now only because the edge has not bound it yet
  let ports: number[];
  do ports = await Promise.all([freePort(), freePort(), freePort()]);
  while (ports.includes(httpPort));
  const [listenPort, managementPort, tlsPort] = ports;
  // a subject of its own: two pebbles' certificates in one trust file must not share a name
  const listener = await selfSigned([`pebble-${listenPort}.localhost`, 'localhost', '127.0.0.1'], 2);
  const caCertFile = path.join(dir, 'cert.pem');
  const keyFile = path.join(dir, 'key.pem');
  writeFileSync(caCertFile, listener.cert);
  writeFileSync(keyFile, listener.key, { mode: 0o600 });
  const configFile = path.join(dir, 'pebble-config.json');
  writeFileSync(configFile, JSON.stringify({
    pebble: {
      listenAddress: `127.0.0.1:${listenPort}`,
      managementListenAddress: `127.0.0.1:${managementPort}`,
      certificate: caCertFile,
      privateKey: keyFile,
      httpPort,
      tlsPort,
      ocspResponderURL: '',
      externalAccountBindingRequired: externalAccountMACKeys !== undefined,
      ...(externalAccountMACKeys ? { externalAccountMACKeys } : {}),
      ...(domainBlocklist ? { domainBlocklist } : {}),
      ...(certificateValidityPeriod ? { certificateValidityPeriod } : {}),
    },
  }));

  const child: ChildProcess = spawn('pebble', ['-config', configFile, '-dnsserver', dnsServer], {
    stdio: ['ignore', 'pipe', 'pipe'],
    // no sleep before validation, no bad-nonce injection, (almost) no authorisation reuse: every
    // issue is a full order, and fast. Pebble still reuses a valid authorisation in 1 % of orders
    // (its test is rand.Intn(100) > PEBBLE_AUTHZREUSE), so a second order for a name may serve no challenge
    env: { ...process.env, PEBBLE_VA_NOSLEEP: '1', PEBBLE_WFE_NONCEREJECT: '0', PEBBLE_AUTHZREUSE: '0' },
  });
  let output = '';
  const collect = (chunk: Buffer) => { output += chunk.toString(); };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  const spawned = new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', (err) => reject(new Error('starting pebble (Debian package `pebble`)', { cause: err })));
  });
  const exited = () => new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  const stop = async () => {
    child.kill('SIGKILL');
    await exited();
    rmSync(dir, { recursive: true, force: true });
  };

  const get = (url: string) => new Promise<string>((resolve, reject) => {
    https.get(url, { ca: listener.cert }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => { body += chunk; });
      response.on('end', () => {
        if (response.statusCode === 200) resolve(body);
        else reject(new Error(`pebble GET ${url}: ${response.statusCode} ${body}`));
      });
      response.on('error', reject);
    }).on('error', reject);
  });

  const directoryUrl = `https://127.0.0.1:${listenPort}/dir`;
  const management = `https://127.0.0.1:${managementPort}`;
  try {
    await spawned;
    const deadline = Date.now() + 10_000;
    for (;;) {
      try {
        await Promise.all([get(directoryUrl), get(`${management}/roots/0`)]);
        break;
      } catch (err) {
        if (child.exitCode !== null) throw new Error(`pebble exited with ${child.exitCode}: ${output}`);
        if (Date.now() > deadline) throw new Error(`pebble did not answer on ${directoryUrl}: ${output}`, { cause: err });
        await new Promise((r) => setTimeout(r, 25));
      }
    }
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    directoryUrl,
    caCertFile,
    caCertPem: listener.cert,
    rootPem: () => get(`${management}/roots/0`),
    intermediatePem: () => get(`${management}/intermediates/0`),
    orders: () => output.match(ORDER_LINE)?.length ?? 0,
    log: () => output,
    stop,
  };
}
