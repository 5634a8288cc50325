// Admin reads through a Redis outage (DESIGN §8): what an instance has answered once it answers
// again while Redis is gone, from its last answer; what changed since — on another instance too —
// is not answered from an old copy; a read never made answers 503.
import t from 'tap';
import { startPortico } from '../helpers/portico.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { startRedis } from '../helpers/redis.ts';
import { admin } from '../helpers/client.ts';

const upstream = await startUpstream();
t.teardown(() => upstream.stop());
const redis = await startRedis();
t.teardown(() => redis.stop());
// no DNS server answers: the domains stay pending, nothing but the admin API writes
const env = { PORTICO_REDIS_URL: redis.url, PORTICO_DNS_SERVERS: '127.0.0.1:9' };
const a = await startPortico(env);
t.teardown(() => a.stop());
const b = await startPortico(env);
t.teardown(() => b.stop());

const account = (await admin(a.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
const project = (await admin(a.ports.admin, 'POST', '/admin/projects', { accountId: account.id, name: 'kept', upstream: upstream.url })).json;
const domains = `/admin/projects/${project.id}/domains`;

t.test('reads answered once answer again with Redis gone; a removal on another instance is not undone', async (t) => {
  for (const hostname of ['stays.example.com', 'goes.example.com']) {
    const added = await admin(a.ports.admin, 'POST', domains, { hostname });
    t.equal(added.status, 201, added.text);
  }
  const reads = ['/admin/projects', `/admin/projects/${project.id}`, domains, `${domains}/stays.example.com`, `${domains}/stays.example.com/events`, `/admin/accounts/${account.id}`];
  const before = new Map<string, string>();
  for (const path of reads) {
    const answer = await admin(b.ports.admin, 'GET', path);
    t.equal(answer.status, 200, path);
    before.set(path, answer.text);
  }
  t.equal((await admin(b.ports.admin, 'GET', `${domains}/goes.example.com`)).status, 200);
  // removed on A: B's copies (the domain, the project's lists) must not answer for it any more
  t.equal((await admin(a.ports.admin, 'DELETE', `${domains}/goes.example.com`)).status, 204);
  await new Promise((r) => setTimeout(r, 200));
  for (const path of reads) t.equal((await admin(b.ports.admin, 'GET', path)).status, 200, `${path} read again after the notice`);

  await redis.kill();
  for (const path of reads) {
    const answer = await admin(b.ports.admin, 'GET', path);
    t.equal(answer.status, 200, `${path} with Redis gone`);
    if (path !== `/admin/accounts/${account.id}`) t.notMatch(answer.text, /goes\.example\.com/, `${path}: the removed domain is not in it`);
  }
  t.same(JSON.parse((await admin(b.ports.admin, 'GET', domains)).text).map((d: { hostname: string }) => d.hostname), ['stays.example.com']);
  const gone = await admin(b.ports.admin, 'GET', `${domains}/goes.example.com`);
  t.equal(gone.status, 503, 'the removed domain: not from the copy made before its removal');
  t.equal((await admin(b.ports.admin, 'GET', `${domains}?status=verified`)).status, 503, 'a read never made');
  t.equal((await admin(b.ports.admin, 'POST', domains, { hostname: 'new.example.com' })).status, 503, 'writes: 503');
  t.equal((await admin(b.ports.admin, 'GET', `${domains}/stays.example.com`)).status, 503, 'a write through this instance drops its copies: it may have been applied');

  // the test's redis-server keeps nothing on disk: back, it is empty, and the read says so
  await redis.restart();
  let status = 503;
  for (let i = 0; i < 100 && status === 503; i++) {
    status = (await admin(b.ports.admin, 'GET', `${domains}/stays.example.com`)).status;
    if (status === 503) await new Promise((r) => setTimeout(r, 100));
  }
  t.equal((await admin(b.ports.admin, 'GET', `/admin/projects/${project.id}`)).status, 404, 'Redis back: read from it, not from the copy');
});
