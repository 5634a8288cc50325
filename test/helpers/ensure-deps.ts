// Before the suite: the real peers the tests start (redis-server, pebble, …) must be installed.
// On Debian/Ubuntu as root, missing packages are installed with apt; elsewhere one line says what to install.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const NEEDED: Array<[binary: string, pkg: string]> = [
  ['redis-server', 'redis-server'],
  ['pebble', 'pebble'],
  ['pebble-challtestsrv', 'pebble'],
  ['promtool', 'prometheus'],
  ['chromium', 'chromium'],
  ['h2load', 'nghttp2-client'],
  ['curl', 'curl'],
  // the TLS Redis topologies' certificate (test/helpers/redis-topology.ts)
  ['openssl', 'openssl'],
];

const onPath = (binary: string) => spawnSync('sh', ['-c', `command -v ${binary}`], { stdio: 'ignore' }).status === 0;
const missing = NEEDED.filter(([binary]) => !onPath(binary)).map(([, pkg]) => pkg);

if (missing.length > 0) {
  const canApt = process.getuid?.() === 0 && existsSync('/usr/bin/apt-get');
  if (!canApt) {
    console.error(`portico tests need these Debian packages: ${missing.join(' ')} (install them with: sudo apt-get install -y ${missing.join(' ')})`);
    process.exit(1);
  }
  console.log(`installing ${missing.join(' ')} with apt-get`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
  execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...missing], { stdio: 'inherit', env });
}
