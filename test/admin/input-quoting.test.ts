// The admin API on what a tester sent it: `curl -d ''` to calls that need no body, escape sequences,
// bidi overrides and 60 KB values in what it quotes back, a hostname of the wrong type, path bytes that
// are not UTF-8, and query filters given empty or twice.
import t from 'tap';
import http from 'node:http';
import { ADMIN_TOKEN, startPortico } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { accountWithKey, admin, api } from '../helpers/client.ts';

const dns = await startChalltestsrv();
t.teardown(() => dns.stop());
const upstream = await startUpstream();
t.teardown(() => upstream.stop());
const portico = await startPortico({ PORTICO_DNS_SERVERS: dns.dnsServer });
t.teardown(() => portico.stop());
const call = (method: string, path: string, body?: unknown) => admin(portico.ports.admin, method, path, body);

const account = (await call('POST', '/admin/accounts', { plan: 'pro' })).json;
const project = (await call('POST', '/admin/projects', { accountId: account.id, name: 'quotes', upstream: upstream.url })).json;
const domains = `/admin/projects/${project.id}/domains`;
t.equal((await call('POST', domains, { hostname: 'shop.example.com' })).status, 201);

/** an admin call with the body and headers exactly as given (`body: null` sends chunked with no bytes) */
function raw(method: string, path: string, headers: Record<string, string>, body: string | null = '') {
  return new Promise<{ status: number; json: { code: string; message: string } }>((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: portico.ports.admin, method, path, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, json: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    if (body === null) {
      req.setHeader('transfer-encoding', 'chunked');
      req.flushHeaders();
      req.end();
    } else req.end(body);
  });
}

// what may not reach a terminal or a page unescaped: C0 and C1 controls, line separators, bidi marks
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

t.test('calls that need no body take an empty one whatever its content type (curl -d "")', async (t) => {
  const verify = `${domains}/shop.example.com/verify`;
  const form = { 'content-type': 'application/x-www-form-urlencoded', 'content-length': '0' };
  t.equal((await raw('POST', verify, form)).status, 200, 'verify, form content type, length 0');
  t.equal((await raw('POST', verify, { 'content-type': 'text/plain' }, null)).status, 200, 'verify, text/plain, chunked with no bytes');
  t.equal((await raw('POST', `${domains}/shop.example.com/reverify`, form)).status, 200, 'reverify, form content type, length 0');
  t.equal((await raw('POST', '/admin/reload', form)).status, 200, 'reload, form content type, length 0');
  t.equal((await raw('POST', '/admin/reload', { 'content-type': 'text/plain', 'content-length': '0' })).status, 200, 'reload, text/plain, length 0');
  // a body with bytes in it must still be JSON
  const formBody = await raw('POST', verify, { 'content-type': 'application/x-www-form-urlencoded' }, 'a=b');
  t.equal(formBody.status, 415, 'a form body');
  t.equal(formBody.json.code, 'unsupported_media_type');
  t.equal((await raw('POST', '/admin/reload', { 'content-type': 'text/plain', 'transfer-encoding': 'chunked' }, 'x')).status, 415, 'reload, chunked text');
  // a call that needs a body still needs a JSON one
  t.equal((await raw('POST', '/admin/accounts', form)).status, 415, 'creating an account with an empty form body');
});

t.test('/v1 still wants a JSON content type on an empty body', async (t) => {
  const { key } = await accountWithKey(portico.ports.admin, 'pro');
  const answer = await api(portico.ports.https, portico.ca, key, { method: 'POST', path: '/v1/categories', headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-length': '0' }, body: '' });
  t.equal(answer.status, 415);
});

t.test('what the caller sent is quoted escaped and bounded', async (t) => {
  const escape = await call('POST', domains, { hostname: 'x\u001b[2Jy.example.com' });
  t.equal(escape.status, 400);
  t.notMatch(escape.json.message, UNSAFE, 'no raw ESC');
  t.match(escape.json.message, /"x\\x1b\[2Jy\.example\.com" contains "\\x1b"/, 'the ESC written as an escape');

  const bidi = await call('POST', domains, { hostname: 'moc.elpmaxe\u202e.example.com' });
  t.equal(bidi.status, 400);
  t.notMatch(bidi.json.message, UNSAFE, 'no raw bidi override');
  t.match(bidi.json.message, /\\u202e/);

  for (const hostname of ['a'.repeat(60_000) + '.example.com', 'a!'.repeat(30_000) + '.example.com']) {
    const long = await call('POST', domains, { hostname });
    t.equal(long.status, 400);
    t.equal(long.json.code, 'invalid_hostname');
    t.ok(long.json.message.length < 400, `a ${hostname.length}-character name is quoted in ${long.json.message.length} characters`);
    t.match(long.json.message, `(${hostname.length} characters)`, 'says how long it was');
  }

  const pathName = await call('GET', `${domains}/${encodeURIComponent('shop\u202e\u0085.example.com')}`);
  t.equal(pathName.status, 404, 'a name in the path');
  t.notMatch(pathName.json.message, UNSAFE);
  t.match(pathName.json.message, /"shop\\u202e\\x85\.example\.com" is not a domain of project quotes\./);
  const longPath = await call('GET', `${domains}/${'b'.repeat(8000)}.example.com/events`);
  t.equal(longPath.status, 404);
  t.ok(longPath.json.message.length < 300, `an 8 KB name in the path is quoted in ${longPath.json.message.length} characters`);

  const from = await call('POST', `/admin/projects/${project.id}/redirects`, { from: `${'c'.repeat(20_000)}\u2028.example.com`, to: 'shop.example.com' });
  t.equal(from.status, 404, 'a redirect from a name no domain has');
  t.notMatch(from.json.message, UNSAFE);
  t.ok(from.json.message.length < 300);

  const field = await call('POST', '/admin/accounts', { plan: 'pro', ['\u001b]0;owned\u0007' + 'f'.repeat(5000)]: 1 });
  t.equal(field.status, 400, 'an unknown field');
  t.notMatch(field.json.message, UNSAFE);
  t.ok(field.json.message.length < 200, `its name is cut (${field.json.message.length} characters)`);
  const many = await call('POST', '/admin/accounts', { plan: 'pro', ...Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`x${i}`, 1])) });
  t.equal(many.status, 400, '5000 unknown fields');
  t.ok(many.json.message.length < 200, `are not all listed (${many.json.message.length} characters)`);
  t.match(many.json.message, /and 4995 more/);

  const id = await call('GET', `/admin/accounts/${encodeURIComponent('acc_\u001b[31m\u202e')}`);
  t.equal(id.status, 404, 'an id in the path');
  t.notMatch(id.json.message, UNSAFE);
  const project404 = await call('GET', `/admin/projects/${'p'.repeat(10_000)}`);
  t.ok(project404.json.message.length < 200, 'a long project id is cut');

  const upstreamUrl = await call('POST', '/admin/projects', { accountId: account.id, name: 'bidi', upstream: `\u202ehttp://x${'y'.repeat(10_000)}` });
  t.equal(upstreamUrl.status, 400, 'an upstream that is not a URL');
  t.notMatch(upstreamUrl.json.message, UNSAFE);
  t.ok(upstreamUrl.json.message.length < 400);

  // the JSON parser quotes a few characters of the body
  const notJson = await raw('POST', '/admin/accounts', { 'content-type': 'application/json' }, '\u202e\u0085{"plan":"pro"}');
  t.equal(notJson.status, 400, 'a body that is not JSON');
  t.notMatch(notJson.json.message, UNSAFE);

  // a Host header may carry bytes above 0x7f (read as Latin-1), C1 controls among them
  const host = await raw('GET', '/admin/projects', { host: 'a\u009b2J.example' });
  t.equal(host.status, 421);
  t.notMatch(host.json.message, UNSAFE, 'the Host header quoted escaped');
});

t.test('messages say what was wrong', async (t) => {
  const fields = await call('POST', `${domains}/shop.example.com/verify`, { x: 1 });
  t.equal(fields.status, 400);
  t.match(fields.json.message, /^This call takes no fields: send no body, or \{\}; got "x"\.$/);
  t.match((await call('POST', '/admin/reload', { force: true })).json.message, /takes no fields/);

  for (const [hostname, kind] of [[123, 'a number'], [null, 'null'], [['a.com'], 'an array'], [{}, 'an object'], [true, 'true']] as const) {
    const answer = await call('POST', domains, { hostname });
    t.equal(answer.status, 400, `hostname ${JSON.stringify(hostname)}`);
    t.equal(answer.json.code, 'invalid_hostname');
    t.match(answer.json.message, `"hostname" must be a string, such as "shop.example.com"; got ${kind}.`);
  }
  t.match((await call('POST', domains, {})).json.message, /^A hostname is required/, 'left out: required');

  const notUtf8 = await call('GET', `${domains}/%FF%FE.example.com`);
  t.equal(notUtf8.status, 400);
  t.match(notUtf8.json.message, /"%FF%FE\.example\.com" in the path is valid percent-encoding, but of bytes that are not UTF-8/);
  const broken = await call('GET', `${domains}/%ZZshop.example.com`);
  t.equal(broken.status, 400);
  t.match(broken.json.message, /^The path is not valid percent-encoding: in "%ZZshop\.example\.com", a "%" must be followed by two hexadecimal digits\.$/);
});

t.test('a query filter given empty or twice is refused', async (t) => {
  t.equal((await call('GET', `${domains}?status=pending`)).status, 200, 'one value');
  t.equal((await call('GET', domains)).status, 200, 'no filter');
  for (const query of ['status=', 'health=', 'status=pending&status=verified', 'health=ok&health=ok', 'status=bogus']) {
    const answer = await call('GET', `${domains}?${query}`);
    t.equal(answer.status, 400, `?${query}`);
    t.equal(answer.json.code, 'invalid_request');
  }
  t.match((await call('GET', `${domains}?status=`)).json.message, /^"status" must be one of pending, verified, failed; got an empty value\./);
  t.match((await call('GET', `${domains}?status=pending&status=verified`)).json.message, /^"status" is given 2 times; give it once \(one of pending, verified, failed\)\./);
  t.equal((await call('GET', `/admin/projects?accountId=${account.id}&accountId=acc_other`)).status, 400, 'accountId twice');
  t.equal((await call('GET', `/admin/projects?accountId=${account.id}`)).json.length, 1, 'accountId once');
  // from an empty shell variable: it listed every account's projects
  const empty = await call('GET', '/admin/projects?accountId=');
  t.equal(empty.status, 400, 'accountId empty');
  t.match(empty.json.message, /^"accountId" is empty; give a value, or leave "accountId" out for no filter\.$/);
});
