// A real DNS server for tests: pebble-challtestsrv (Debian package `pebble`), scripted over its HTTP
// management API. With empty default addresses, names that were not added do not resolve (NOERROR
// with no answer: NODATA, never NXDOMAIN). A query for a CNAME'd name returns the CNAME plus the
// target's records of the asked type.
//
// What its API wants (pebble 2.4.0): hosts are matched case-sensitively against the lowercase query
// name, so hostnames are lowercased here; A/AAAA/CNAME/CAA/SERVFAIL hosts get their trailing dot
// added by the server, TXT hosts (/set-txt, not /add-txt as the upstream README says) do not, so
// every host is sent fully qualified. A CNAME target keeps its case (verifiers must fold it).
import { spawn, type ChildProcess } from 'node:child_process';
import { freePort } from './free-port.ts';

export interface CaaPolicy {
  tag: string;
  value: string;
}

export interface Challtestsrv {
  /** "127.0.0.1:<port>", for systemResolver([dnsServer]) */
  dnsServer: string;
  addA(host: string, addresses: string[]): Promise<void>;
  clearA(host: string): Promise<void>;
  addAAAA(host: string, addresses: string[]): Promise<void>;
  clearAAAA(host: string): Promise<void>;
  setCname(host: string, target: string): Promise<void>;
  clearCname(host: string): Promise<void>;
  addCaa(host: string, policies: CaaPolicy[]): Promise<void>;
  clearCaa(host: string): Promise<void>;
  /** every query for the host answers SERVFAIL, whatever else is set */
  setServfail(host: string): Promise<void>;
  clearServfail(host: string): Promise<void>;
  /** adds one TXT record; several calls for one host give several records */
  addTxt(host: string, value: string): Promise<void>;
  clearTxt(host: string): Promise<void>;
  stop(): Promise<void>;
}

const absolute = (name: string) => (name.endsWith('.') ? name : `${name}.`);
const fqdn = (host: string) => absolute(host.toLowerCase());

export async function startChalltestsrv(): Promise<Challtestsrv> {
  const [dnsPort, managementPort] = await Promise.all([freePort(), freePort()]);
  const management = `http://127.0.0.1:${managementPort}`;
  const child: ChildProcess = spawn('pebble-challtestsrv', [
    '-defaultIPv4', '', '-defaultIPv6', '',
    '-dns01', `127.0.0.1:${dnsPort}`,
    '-http01', '', '-https01', '', '-tlsalpn01', '',
    '-management', `127.0.0.1:${managementPort}`,
  ], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
  const spawned = new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', (err) => reject(new Error('starting pebble-challtestsrv (Debian package `pebble`)', { cause: err })));
  });
  const exited = () => new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });

  const post = async (path: string, body: object): Promise<void> => {
    const response = await fetch(management + path, { method: 'POST', body: JSON.stringify(body) });
    const text = await response.text();
    if (!response.ok) throw new Error(`challtestsrv ${path} ${JSON.stringify(body)}: ${response.status} ${text}`);
  };

  await spawned;
  const deadline = Date.now() + 5000;
  // /clear-a on a name nobody added is a harmless probe that the management API answers
  for (;;) {
    try {
      await post('/clear-a', { host: 'probe.invalid.' });
      break;
    } catch (err) {
      if (child.exitCode !== null) throw new Error(`pebble-challtestsrv exited with ${child.exitCode}: ${stderr}`);
      if (Date.now() > deadline) throw new Error(`pebble-challtestsrv management API did not answer on ${managementPort}: ${stderr}`, { cause: err });
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  return {
    dnsServer: `127.0.0.1:${dnsPort}`,
    addA: (host, addresses) => post('/add-a', { host: fqdn(host), addresses }),
    clearA: (host) => post('/clear-a', { host: fqdn(host) }),
    addAAAA: (host, addresses) => post('/add-aaaa', { host: fqdn(host), addresses }),
    clearAAAA: (host) => post('/clear-aaaa', { host: fqdn(host) }),
    setCname: (host, target) => post('/set-cname', { host: fqdn(host), target: absolute(target) }),
    clearCname: (host) => post('/clear-cname', { host: fqdn(host) }),
    addCaa: (host, policies) => post('/add-caa', { host: fqdn(host), policies }),
    clearCaa: (host) => post('/clear-caa', { host: fqdn(host) }),
    setServfail: (host) => post('/set-servfail', { host: fqdn(host) }),
    clearServfail: (host) => post('/clear-servfail', { host: fqdn(host) }),
    addTxt: (host, value) => post('/set-txt', { host: fqdn(host), value }),
    clearTxt: (host) => post('/clear-txt', { host: fqdn(host) }),
    async stop() {
      child.kill('SIGKILL');
      await exited();
    },
  };
}
