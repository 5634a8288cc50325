// Real Redis topologies from Debian's redis-server, for tests and the bench (TOOLCHAIN.md, "Redis
// topologies"): Sentinel (a primary, two replicas, three sentinels, down-after 1000 ms) and Cluster
// (three primaries with a replica each). Primaries sync diskless at once (--repl-diskless-sync-delay 0)
// and a topology is handed out only once every replica's link is up, so a failover can happen at once.
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { promisify } from 'node:util';
import { freePort } from './free-port.ts';

const run = promisify(execFile);

export interface RedisNode {
  port: number;
  dir: string;
  readonly process: ChildProcess;
  /** SIGKILL, and wait for the exit */
  kill(): Promise<void>;
  /** start again on the same port and dir (a killed primary comes back; Sentinel makes it a replica) */
  restart(): Promise<void>;
}

export interface SentinelTopology {
  /** with the password (user `default`) when there is one */
  url: string;
  /** TLS: the certificate to trust (NODE_EXTRA_CA_CERTS) */
  caFile?: string;
  name: string;
  nodes: RedisNode[];
  sentinels: RedisNode[];
  /** the node the sentinels name as primary now (the newest view: the one with the highest epoch) */
  primary(): Promise<RedisNode>;
  /**
   * Resolves once every sentinel names the same primary: a failover is over for clients only then, since
   * each sentinel announces +switch-master when it learns of it, and clients act on those announcements.
   */
  settled(): Promise<void>;
  stop(): Promise<void>;
}

export interface ClusterTopology {
  /** with the password (user `default`) when there is one */
  url: string;
  /** TLS: the certificate to trust (NODE_EXTRA_CA_CERTS) */
  caFile?: string;
  nodes: RedisNode[];
  /** the primary owning `slot` now */
  primaryOf(slot: number): Promise<RedisNode>;
  /** node ids by port */
  ids(): Promise<Map<number, string>>;
  /** `redis-cli --cluster reshard` of `count` slots from one primary to another */
  reshard(from: RedisNode, to: RedisNode, count: number): Promise<void>;
  stop(): Promise<void>;
}

export interface TopologyOptions {
  /**
   * TLS only on every node and sentinel, with a new self-signed certificate (`caFile`) for localhost
   * and 127.0.0.1, or with `hostnames` for the name localhost only (as a Kubernetes certificate names
   * services, not addresses)
   */
  tls?: boolean;
  /** requirepass on the Redis nodes (not the sentinels) */
  password?: string;
  /** Sentinel: requirepass on the sentinels themselves, given in the URL as ?sentinel_password= */
  sentinelPassword?: string;
  /**
   * Sentinel: an ACL user on the sentinels with these rules, given in the URL as ?sentinel_username=
   * &sentinel_password= (the default user, which the sentinels use with each other, stays open)
   */
  sentinelUser?: { name: string; password: string; rules: string };
  /**
   * every node known and announced by the name `localhost`, not by address: Sentinel's
   * `announce-hostnames`, Cluster's `cluster-announce-hostname` with hostname endpoints
   */
  hostnames?: boolean;
  /**
   * Sentinel: the port each of these sentinels (by index) announces itself on to the others, who then
   * name it there (SENTINEL SENTINELS): a relay in front of it, say
   */
  sentinelAnnouncePorts?: Record<number, number>;
  /** Cluster: cluster-node-timeout (default 1000 ms: a failover within a couple of seconds) */
  nodeTimeoutMs?: number;
  /**
   * Cluster: cluster-require-full-coverage (Redis's default, true: while a failed primary's slots have
   * no owner, every node answers -CLUSTERDOWN for every slot)
   */
  fullCoverage?: boolean;
}

/** redis-cli's TLS and password arguments per port of a topology that has them */
const cliArgs = new Map<number, string[]>();

export async function cli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run('redis-cli', [...(cliArgs.get(port) ?? []), '-h', '127.0.0.1', '-p', String(port), ...args], { timeout: 60_000 });
  return stdout.trim();
}

/** the certificate (self-signed, also its own CA) and the node arguments for TLS and a password */
async function security(root: string, options: TopologyOptions): Promise<{ caFile?: string; node: string[]; conf: string[]; cli: string[] }> {
  const out = { node: [] as string[], conf: [] as string[], cli: [] as string[], caFile: undefined as string | undefined };
  if (options.tls) {
    // openssl rather than fallback.ts's selfSigned(): the cluster bus always asks the connecting node
    // for its certificate, so the one certificate must serve as client too (no serverAuth-only
    // extended key usage), and as the CA that verifies it
    out.caFile = path.join(root, 'cert.pem');
    const keyFile = path.join(root, 'key.pem');
    await run('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', keyFile, '-out', out.caFile, '-days', '1', '-subj', '/CN=localhost', '-addext', `subjectAltName=${options.hostnames ? 'DNS:localhost' : 'DNS:localhost,IP:127.0.0.1'}`]);
    const settings: Array<[string, string]> = [['tls-cert-file', out.caFile], ['tls-key-file', keyFile], ['tls-ca-cert-file', out.caFile], ['tls-auth-clients', 'no'], ['tls-replication', 'yes']];
    out.node = settings.flatMap(([k, v]) => [`--${k}`, v]);
    out.conf = settings.map(([k, v]) => `${k} ${v}`);
    out.cli = ['--tls', '--cacert', out.caFile];
  }
  return out;
}

async function listening(port: number, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.once('connect', () => { socket.destroy(); resolve(true); });
      socket.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`redis-server did not listen on ${port}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function startNode(port: number, dir: string, args: string[], sentinelConf?: string, tls = false): RedisNode {
  let child: ChildProcess;
  const listen = tls ? ['--port', '0', '--tls-port', String(port)] : ['--port', String(port)];
  const launch = () => {
    child = sentinelConf
      ? spawn('redis-server', [sentinelConf, '--sentinel'], { stdio: 'ignore' })
      : spawn('redis-server', [...listen, '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--repl-diskless-sync-delay', '0', ...args], { stdio: 'ignore' });
  };
  launch();
  return {
    port,
    dir,
    get process() { return child; },
    async kill() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    },
    async restart() {
      launch();
      await listening(port);
    },
  };
}

const sentinelQuery = (o: TopologyOptions) =>
  o.sentinelUser
    ? `?sentinel_username=${encodeURIComponent(o.sentinelUser.name)}&sentinel_password=${encodeURIComponent(o.sentinelUser.password)}`
    : o.sentinelPassword ? `?sentinel_password=${encodeURIComponent(o.sentinelPassword)}` : '';
const authArgs = (o: TopologyOptions) => (o.password ? ['--requirepass', o.password, '--masterauth', o.password] : []);
const passwordArgs = (o: TopologyOptions) => (o.password ? ['-a', o.password, '--no-auth-warning'] : []);
const userinfo = (o: TopologyOptions) => (o.password ? `default:${encodeURIComponent(o.password)}@` : '');

// with hostnames, the URL names the servers as a Kubernetes deployment does: by name
const urlHost = (o: TopologyOptions) => (o.hostnames ? 'localhost' : '127.0.0.1');

const linkUp = async (port: number) => (await cli(port, 'INFO', 'replication')).includes('master_link_status:up');

export async function startSentinel({ name = 'portico', ...options }: { name?: string } & TopologyOptions = {}): Promise<SentinelTopology> {
  const root = mkdtempSync(path.join(tmpdir(), 'portico-sentinel-'));
  const sec = await security(root, options);
  const ports = await Promise.all([freePort(), freePort(), freePort()]);
  const nodes: RedisNode[] = [];
  for (const [i, port] of ports.entries()) {
    const dir = path.join(root, `node-${i}`);
    mkdirSync(dir);
    cliArgs.set(port, [...sec.cli, ...passwordArgs(options)]);
    const host = options.hostnames ? 'localhost' : '127.0.0.1';
    const announce = options.hostnames ? ['--replica-announce-ip', 'localhost'] : [];
    nodes.push(startNode(port, dir, [...sec.node, ...authArgs(options), ...announce, ...(i === 0 ? [] : ['--replicaof', host, String(ports[0])])], undefined, options.tls));
  }
  await Promise.all(nodes.map((n) => listening(n.port)));
  await until('replicas in sync', async () => (await Promise.all(nodes.slice(1).map((n) => linkUp(n.port)))).every(Boolean));
  const sentinels: RedisNode[] = [];
  for (let i = 0; i < 3; i++) {
    const port = await freePort();
    const dir = path.join(root, `sentinel-${i}`);
    mkdirSync(dir);
    const conf = path.join(dir, 'sentinel.conf');
    const sentinelAuth = options.sentinelPassword ? ['-a', options.sentinelPassword, '--no-auth-warning'] : [];
    cliArgs.set(port, [...sec.cli, ...sentinelAuth]);
    writeFileSync(conf, [
      ...(options.tls ? ['port 0', `tls-port ${port}`, ...sec.conf] : [`port ${port}`]),
      'bind 127.0.0.1', `dir ${dir}`,
      ...(options.hostnames ? ['sentinel resolve-hostnames yes', 'sentinel announce-hostnames yes'] : []),
      ...(options.sentinelAnnouncePorts?.[i] ? ['sentinel announce-ip 127.0.0.1', `sentinel announce-port ${options.sentinelAnnouncePorts[i]}`] : []),
      `sentinel monitor ${name} ${options.hostnames ? 'localhost' : '127.0.0.1'} ${ports[0]} 2`,
      ...(options.password ? [`sentinel auth-pass ${name} ${options.password}`] : []),
      // the sentinels' own password, which they also use with each other
      ...(options.sentinelPassword ? [`requirepass ${options.sentinelPassword}`, `sentinel sentinel-pass ${options.sentinelPassword}`] : []),
      ...(options.sentinelUser ? [`user ${options.sentinelUser.name} on >${options.sentinelUser.password} ${options.sentinelUser.rules}`] : []),
      `sentinel down-after-milliseconds ${name} 1000`,
      `sentinel failover-timeout ${name} 5000`,
      '',
    ].join('\n'));
    sentinels.push(startNode(port, dir, [], conf));
  }
  await Promise.all(sentinels.map((s) => listening(s.port)));
  // every sentinel has found both replicas and the other sentinels
  await until('sentinels ready', async () => {
    for (const s of sentinels) {
      const info = await cli(s.port, 'SENTINEL', 'MASTER', name);
      const field = (f: string) => { const lines = info.split('\n'); return lines[lines.indexOf(f) + 1]; };
      if (field('num-slaves') !== '2' || field('num-other-sentinels') !== '2') return false;
    }
    return true;
  });
  const byPort = (port: number) => nodes.find((n) => n.port === port)!;
  return {
    url: `${options.tls ? 'rediss' : 'redis'}+sentinel://${userinfo(options)}${sentinels.map((s) => `${urlHost(options)}:${s.port}`).join(',')}/${name}${sentinelQuery(options)}`,
    caFile: sec.caFile,
    name,
    nodes,
    sentinels,
    async primary() {
      // the newest view: the sentinel that led a failover knows it before the others hear of it (their
      // hello messages come every 2 s). Take the highest configuration epoch; GET-MASTER-ADDR-BY-NAME
      // names the promoted replica as soon as the epoch moves (SENTINEL MASTER's address follows later).
      let newest = { epoch: -1, port: 0 };
      for (const sentinel of sentinels) {
        const lines = (await cli(sentinel.port, 'SENTINEL', 'MASTER', name).catch(() => '')).split('\n');
        if (!lines.includes('config-epoch')) continue;
        const epoch = Number(lines[lines.indexOf('config-epoch') + 1]);
        if (epoch <= newest.epoch) continue;
        const [, port] = (await cli(sentinel.port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)).split('\n');
        newest = { epoch, port: Number(port) };
      }
      if (newest.epoch < 0) throw new Error('no sentinel answered SENTINEL MASTER');
      return byPort(newest.port);
    },
    async settled() {
      await until('every sentinel naming one primary', async () => {
        const named = await Promise.all(sentinels.map((s) => cli(s.port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)));
        return named.every((n) => n === named[0]);
      });
    },
    async stop() {
      await Promise.all([...sentinels, ...nodes].map((n) => n.kill()));
      for (const n of [...sentinels, ...nodes]) cliArgs.delete(n.port);
      rmSync(root, { recursive: true, force: true });
    },
  };
}

export async function startCluster(options: TopologyOptions = {}): Promise<ClusterTopology> {
  const root = mkdtempSync(path.join(tmpdir(), 'portico-cluster-'));
  const sec = await security(root, options);
  const cliSecurity = [...sec.cli, ...passwordArgs(options)];
  const nodes: RedisNode[] = [];
  const ports = new Set<number>();
  // a node's cluster bus listens on its port + 10000
  while (ports.size < 6) ports.add(await freePort({ plus: 10_000 }));
  for (const port of ports) {
    const dir = path.join(root, `node-${port}`);
    mkdirSync(dir);
    cliArgs.set(port, cliSecurity);
    nodes.push(startNode(port, dir, [...sec.node, ...(options.tls ? ['--tls-cluster', 'yes'] : []), ...authArgs(options), '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', String(options.nodeTimeoutMs ?? 1000), ...(options.fullCoverage === false ? ['--cluster-require-full-coverage', 'no'] : []), ...(options.hostnames ? ['--cluster-announce-hostname', 'localhost', '--cluster-preferred-endpoint-type', 'hostname'] : [])], undefined, options.tls));
  }
  await Promise.all(nodes.map((n) => listening(n.port)));
  await run('redis-cli', [...cliSecurity, '--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '1', '--cluster-yes'], { timeout: 60_000 });
  await until('cluster ok', async () => (await Promise.all(nodes.map((n) => cli(n.port, 'CLUSTER', 'INFO')))).every((i) => i.includes('cluster_state:ok')));
  const replicasUp = async () => {
    for (const n of nodes) {
      const info = await cli(n.port, 'INFO', 'replication');
      if (info.includes('role:slave') && !info.includes('master_link_status:up')) return false;
    }
    return true;
  };
  await until('replicas in sync', replicasUp);
  const byPort = (port: number) => nodes.find((n) => n.port === port)!;
  const alive = () => nodes.find((n) => n.process.exitCode === null && n.process.signalCode === null)!;
  const ids = async () => {
    const out = new Map<number, string>();
    for (const line of (await cli(alive().port, 'CLUSTER', 'NODES')).split('\n')) {
      const [id, address] = line.split(' ');
      out.set(Number(address.split('@')[0].split(':')[1]), id);
    }
    return out;
  };
  return {
    url: `${options.tls ? 'rediss' : 'redis'}+cluster://${userinfo(options)}${nodes.slice(0, 3).map((n) => `${urlHost(options)}:${n.port}`).join(',')}`,
    caFile: sec.caFile,
    nodes,
    async primaryOf(slot) {
      // a node's view of a failover lags the cluster's by a moment
      let owner: number | undefined;
      await until(`a primary for slot ${slot}`, async () => {
        owner = (await clusterSlots(alive().port)).find(([from, to]) => slot >= from && slot <= to)?.[2];
        return owner !== undefined;
      }, 10_000);
      return byPort(owner!);
    },
    ids,
    async reshard(from, to, count) {
      const known = await ids();
      await run('redis-cli', [...cliSecurity, '--cluster', 'reshard', `127.0.0.1:${to.port}`, '--cluster-from', known.get(from.port)!, '--cluster-to', known.get(to.port)!, '--cluster-slots', String(count), '--cluster-yes'], { timeout: 120_000 });
    },
    async stop() {
      await Promise.all(nodes.map((n) => n.kill()));
      for (const n of nodes) cliArgs.delete(n.port);
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/** [first slot, last slot, primary's port] per range, from CLUSTER NODES (ranges being migrated, `[…]`, are skipped) */
async function clusterSlots(port: number): Promise<Array<[number, number, number]>> {
  const out: Array<[number, number, number]> = [];
  for (const line of (await cli(port, 'CLUSTER', 'NODES')).split('\n')) {
    const fields = line.split(' ');
    if (!fields[2].includes('master') || fields[2].includes('fail')) continue;
    const nodePort = Number(fields[1].split('@')[0].split(':')[1]);
    for (const range of fields.slice(8)) {
      if (range.startsWith('[')) continue;
      const [from, to = from] = range.split('-');
      out.push([Number(from), Number(to), nodePort]);
    }
  }
  return out;
}
