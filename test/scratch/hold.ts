import path from 'node:path';
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { startPortico, provision, buildDist } from '../../bench/lib/portico.ts';
import { startBareServer } from '../../bench/lib/bare.ts';
import { spawnPinned, waitForPort } from '../../bench/lib/proc.ts';

buildDist();
const tmp = mkdtempSync(path.join(os.tmpdir(), 'hold-'));
mkdirSync(path.join(tmp, 'redis'));
const rport = 6399;
spawnPinned('redis', '1', 'redis-server', ['--port', String(rport), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', path.join(tmp, 'redis')]);
await waitForPort(rport);
const redisUrl = `redis://127.0.0.1:${rport}`;
const certsDir = path.join(tmp, 'certs');
const portico = await startPortico({ dataDir: path.join(tmp, 'data'), certsDir, logFile: path.join(tmp, 'p.log'), cpus: '0', redisUrl, nodeArgs: process.env.NODE_ARGS ? process.env.NODE_ARGS.split(' ') : [] });
const { key } = await provision(portico, 9);
const auth = `Bearer ${key}`;
for (const name of ['Dogs', 'Cats', 'Birds']) {
  await fetch(`https://127.0.0.1:${portico.https}/v1/categories`, { method: 'POST', headers: { host: 'api.localhost', authorization: auth, 'content-type': 'application/json' }, body: JSON.stringify({ name, description: 'x' }) }).catch(() => {});
}
const body = Buffer.from('[{"id":1,"name":"Dogs","description":"Loyal companions"},{"id":2,"name":"Cats","description":"Independent spirits"},{"id":3,"name":"Birds","description":"Feathered friends"}]');
const bare = await startBareServer('bare', tmp, '0', portico, body, 'https');
const floor = await startBareServer('floor', tmp, '0', portico, body, 'https', { redisUrl });
const after = await startBareServer('after', tmp, '0', portico, body, 'https', { afterReads: true });
writeFileSync('/tmp/hold.json', JSON.stringify({ auth, portico: { port: portico.https, pid: portico.process.pid }, bare: { port: bare.port, pid: bare.process.pid }, floor: { port: floor.port, pid: floor.process.pid }, after: { port: after.port, pid: after.process.pid } }));
console.log('ready', tmp);
setInterval(() => {}, 1e6);
