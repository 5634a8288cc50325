import t, { type Test } from 'tap';
import http2 from 'node:http2';
import http from 'node:http';
import { startPortico } from '../helpers/portico.ts';
import { api, accountWithKey, admin } from '../helpers/client.ts';

const upstreamHits: Array<{ url: string; headers: http.IncomingHttpHeaders }> = [];
const upstream = http.createServer((req, res) => {
  upstreamHits.push({ url: req.url!, headers: req.headers });
  res.setHeader('content-type', 'application/json');
  res.setHeader('connection', 'keep-alive');
  // an upstream that sends the API's own fields: they must not replace Portico's
  if (req.url!.includes('own-fields')) {
    res.setHeader('x-ratelimit-limit', '999');
    res.setHeader('x-ratelimit-remaining', '998');
    res.setHeader('x-ratelimit-reset', '1');
    res.setHeader('retry-after', '7');
    res.setHeader('deprecation', 'nope');
    res.setHeader('link', '<https://upstream.example/pets?page=2>; rel="next"');
  }
  res.end(JSON.stringify({ from: 'upstream', url: req.url }));
});
await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
t.teardown(() => upstream.close());

const portico = await startPortico({
  PORTICO_API_UPSTREAM: `http://127.0.0.1:${(upstream.address() as { port: number }).port}`,
});
t.teardown(() => portico.stop());
const { https: port } = portico.ports;
const { ca } = portico;
const { key, accountId } = await accountWithKey(portico.ports.admin, 'pro');

const expectError = (t: Test, answer: { status: number; json: unknown }, status: number, code: string) => {
  t.equal(answer.status, status, `status ${status}`);
  t.match(answer.json, { code, status, message: String }, `Error body ${code}`);
  t.same(Object.keys(answer.json as object).sort(), ['code', 'message', 'status']);
};

t.test('without an active key: 401, same body, WWW-Authenticate: Bearer', async (t) => {
  const revoked = await accountWithKey(portico.ports.admin, 'free');
  t.equal((await admin(portico.ports.admin, 'DELETE', `/admin/keys/${revoked.keyId}`)).status, 204);
  const cases: Array<[string, Record<string, string>]> = [
    ['missing', {}],
    ['another scheme', { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }],
    ['malformed', { authorization: 'Bearer not-a-key' }],
    ['garbage', { authorization: '\u00ff\u00fe garbage ;;; ' }],
    ['unknown', { authorization: `Bearer pk_live_${'A'.repeat(43)}` }],
    ['revoked', { authorization: `Bearer ${revoked.key}` }],
    ['staging key on production', { authorization: `Bearer pk_test_${'B'.repeat(43)}` }],
  ];
  const bodies = new Set<string>();
  for (const [name, headers] of cases) {
    const answer = await api(port, ca, null, { path: '/v1/categories', headers });
    expectError(t, answer, 401, 'unauthorized');
    t.match(answer.headers['www-authenticate'], /^Bearer/, `${name}: WWW-Authenticate`);
    bodies.add(answer.text);
  }
  t.equal(bodies.size, 1, 'every 401 has the same body');
});

t.test('create, list and get categories', async (t) => {
  const empty = await api(port, ca, key, { path: '/v1/categories' });
  t.equal(empty.status, 200);
  t.same(empty.json, []);
  const created = await api(port, ca, key, { method: 'POST', path: '/v1/categories', json: { name: '  Dog ', description: 'Canines', extra: true } });
  t.equal(created.status, 201);
  t.match(created.json, { id: Number, name: 'Dog', description: 'Canines' });
  t.notOk('extra' in created.json, 'unknown fields are ignored');
  t.equal(created.headers.location, `/v1/categories/${created.json.id}`);
  const cat = await api(port, ca, key, { method: 'POST', path: '/v1/categories', json: { name: 'Cat' } });
  t.equal(cat.status, 201);
  t.notOk('description' in cat.json, 'absent optional fields are omitted, not null');
  t.ok(cat.json.id > created.json.id);
  const list = await api(port, ca, key, { path: '/v1/categories' });
  t.same(list.json, [created.json, cat.json], 'in id order');
  const one = await api(port, ca, key, { path: `/v1/categories/${cat.json.id}` });
  t.same(one.json, { id: cat.json.id, name: 'Cat' });
  expectError(t, await api(port, ca, key, { path: '/v1/categories/999999' }), 404, 'not_found');
  expectError(t, await api(port, ca, key, { path: '/v1/categories/abc' }), 404, 'not_found');
  expectError(t, await api(port, ca, key, { path: '/v1/categories/9007199254740993' }), 404, 'not_found');
});

t.test('Idempotency-Key: a retried create answers the category the first made, and makes none', async (t) => {
  const owner = await accountWithKey(portico.ports.admin, 'pro');
  const post = (json: unknown, headers: Record<string, string>, who = owner.key) => api(port, ca, who, { method: 'POST', path: '/v1/categories', json, headers });
  const count = async () => (await api(port, ca, owner.key, { path: '/v1/categories' })).json.length as number;
  const before = await count();

  const first = await post({ name: 'Hamsters' }, { 'idempotency-key': 'retry-1f0c' });
  t.equal(first.status, 201);
  t.notOk('idempotent-replayed' in first.headers, 'a first use is no replay');
  const again = await post({ name: 'Hamsters' }, { 'idempotency-key': 'retry-1f0c' });
  t.equal(again.status, 201, 'the retry: 201');
  t.same(again.json, first.json, 'with the same category');
  t.equal(again.headers.location, first.headers.location);
  t.equal(again.headers['idempotent-replayed'], 'true', 'said to be a replay');
  t.ok(again.headers['x-ratelimit-remaining'], 'counted, with X-RateLimit-*');
  t.equal((await post({ name: 'Hamsters' }, { 'idempotency-key': '"retry-1f0c"' })).json.id, first.json.id, 'the quoted form (the IETF draft\'s) is the same key');
  t.equal(await count(), before + 1, 'one category made');

  const reused = await post({ name: 'Gerbils' }, { 'idempotency-key': 'retry-1f0c' });
  expectError(t, reused, 409, 'conflict');
  t.match(reused.json.message, /Idempotency-Key/, reused.json.message);
  const other = await accountWithKey(portico.ports.admin, 'pro');
  const theirs = await post({ name: 'Hamsters' }, { 'idempotency-key': 'retry-1f0c' }, other.key);
  t.equal(theirs.status, 201);
  t.not(theirs.json.id, first.json.id, 'another account\'s key is its own');
  t.notOk('idempotent-replayed' in theirs.headers);

  // ten at once, each on its own connection: one category, nine replays of it
  const racing = await Promise.all(Array.from({ length: 10 }, () => post({ name: 'Ferrets' }, { 'idempotency-key': 'race-9d2e' })));
  t.same(racing.map((a) => a.status), Array(10).fill(201));
  t.equal(new Set(racing.map((a) => a.json.id)).size, 1, 'one id');
  t.equal(racing.filter((a) => a.headers['idempotent-replayed'] === 'true').length, 9, 'nine replays');

  const counted = await count();
  for (const [label, value] of [
    ['empty', ''],
    ['256 characters', 'k'.repeat(256)],
    ['a space', 'two words'],
    ['two keys', 'one, two'],
    ['not ASCII', 'cl\u00e9'],
    ['empty quotes', '""'],
  ]) {
    const refused = await post({ name: `bad key ${label}` }, { 'idempotency-key': value });
    expectError(t, refused, 400, 'invalid_request');
    t.match(refused.json.message, /Idempotency-Key/, `${label}: named`);
  }
  t.equal(await count(), counted, 'a refused key stores nothing');
  t.equal((await post({ name: 'Longest' }, { 'idempotency-key': 'k'.repeat(255) })).status, 201, '255 characters are fine');
});

t.test('bad input gets a clear error and stores nothing', async (t) => {
  const before = (await api(port, ca, key, { path: '/v1/categories' })).json.length;
  const post = (body: string | Buffer, contentType = 'application/json') =>
    api(port, ca, key, { method: 'POST', path: '/v1/categories', body, headers: { 'content-type': contentType } });
  expectError(t, await post('{"name": "Dog"'), 400, 'invalid_request');
  expectError(t, await post('null'), 400, 'invalid_request');
  expectError(t, await post('[{"name":"Dog"}]'), 400, 'invalid_request');
  expectError(t, await post('42'), 400, 'invalid_request');
  expectError(t, await post('{"name": 42}'), 400, 'invalid_request');
  expectError(t, await post('{"name": null}'), 400, 'invalid_request');
  expectError(t, await post('{}'), 400, 'invalid_request');
  expectError(t, await post('{"name": ""}'), 400, 'invalid_request');
  expectError(t, await post('{"name": "   \\t "}'), 400, 'invalid_request');
  expectError(t, await post(JSON.stringify({ name: 'x'.repeat(101) })), 400, 'invalid_request');
  t.equal((await post(JSON.stringify({ name: 'y'.repeat(100) }))).status, 201, '100 characters are fine');
  expectError(t, await post('{"name": "Dog", "description": 7}'), 400, 'invalid_request');
  expectError(t, await post(JSON.stringify({ name: 'Dog', description: 'd'.repeat(1001) })), 400, 'invalid_request');
  expectError(t, await post('{"name":"Dog"}', 'text/plain'), 415, 'unsupported_media_type');
  expectError(t, await api(port, ca, key, { method: 'POST', path: '/v1/categories', body: '{"name":"Dog"}' }), 415, 'unsupported_media_type');
  expectError(t, await post(Buffer.alloc(2 * 1024 * 1024, 'a')), 413, 'payload_too_large');
  expectError(t, await post(JSON.stringify({ name: 'Dog', description: 'x'.repeat(70 * 1024) })), 413, 'payload_too_large');
  const after = (await api(port, ca, key, { path: '/v1/categories' })).json.length;
  t.equal(after, before + 1, 'only the valid 100-character name was stored');
});

t.test('unknown routes and methods', async (t) => {
  expectError(t, await api(port, ca, key, { path: '/v1/nothing' }), 404, 'not_found');
  expectError(t, await api(port, ca, key, { path: '/elsewhere' }), 404, 'not_found');
  const del = await api(port, ca, key, { method: 'DELETE', path: '/v1/categories' });
  expectError(t, del, 405, 'method_not_allowed');
  t.match(del.headers.allow, /GET/);
  t.match(del.headers.allow, /POST/);
  expectError(t, await api(port, ca, key, { method: 'PUT', path: '/v1/categories/1', json: {} }), 405, 'method_not_allowed');
});

t.test('production and staging are separate worlds', async (t) => {
  const staging = await admin(portico.ports.admin, 'POST', '/admin/keys', { accountId, environment: 'staging' });
  t.equal(staging.status, 201);
  t.match(staging.json.key, /^pk_test_/);
  const stagingKey = staging.json.key;
  const opts = { hostname: 'api.staging.localhost' };
  t.same((await api(port, ca, stagingKey, { ...opts, path: '/v1/categories' })).json, [], 'staging starts empty');
  const created = await api(port, ca, stagingKey, { ...opts, method: 'POST', path: '/v1/categories', json: { name: 'Fish' } });
  t.equal(created.status, 201);
  const prod = (await api(port, ca, key, { path: '/v1/categories' })).json as Array<{ name: string }>;
  t.notOk(prod.some((c) => c.name === 'Fish'), 'a staging category is invisible in production');
  expectError(t, await api(port, ca, stagingKey, { path: '/v1/categories' }), 401, 'unauthorized');
  expectError(t, await api(port, ca, key, { ...opts, path: '/v1/categories' }), 401, 'unauthorized');
});

t.test('a key that was just used stops working at once when revoked (the remembered digest decides nothing)', async (t) => {
  const used = await accountWithKey(portico.ports.admin, 'pro');
  for (const authorization of [`Bearer ${used.key}`, `bearer  ${used.key}`]) {
    t.equal((await api(port, ca, null, { path: '/v1/categories', headers: { authorization } })).status, 200, `${authorization.split(' ')[0]}: accepted`);
  }
  t.equal((await admin(portico.ports.admin, 'DELETE', `/admin/keys/${used.keyId}`)).status, 204);
  for (const authorization of [`Bearer ${used.key}`, `bearer  ${used.key}`]) {
    expectError(t, await api(port, ca, null, { path: '/v1/categories', headers: { authorization } }), 401, 'unauthorized');
  }
});

t.test('deprecated pets route and upstream forwarding', async (t) => {
  const pet = await api(port, ca, key, { path: '/v1/pets/7?x=1', headers: { 'x-forwarded-for': '6.6.6.6', connection: 'keep-alive, x-hop', 'x-hop': 'secret' } });
  t.equal(pet.status, 200);
  t.same(pet.json, { from: 'upstream', url: '/v1/pets/7?x=1' });
  t.match(pet.headers.deprecation, /^@\d+$/);
  t.match(pet.headers.sunset, /GMT$/);
  t.match(pet.headers.link, /rel="deprecation"/);
  const hit = upstreamHits.at(-1)!;
  t.equal(hit.headers.authorization, undefined, 'Authorization is removed');
  t.equal(hit.headers['x-portico-account-id'], accountId);
  t.equal(hit.headers['x-portico-environment'], 'production');
  t.equal(hit.headers['x-forwarded-for'], '127.0.0.1', 'client-sent X-Forwarded-For is replaced');
  t.equal(hit.headers['x-hop'], undefined, 'headers named in Connection do not cross');
  const anonymous = await api(port, ca, null, { path: '/v1/pets/7' });
  t.equal(anonymous.status, 401);
  t.match(anonymous.headers.deprecation, /^@\d+$/, 'Deprecation on every answer, 401 too');
  t.equal((await api(port, ca, key, { path: '/v1/store/orders' })).status, 200);

  // the upstream's X-RateLimit-*, Retry-After and Deprecation replaced Portico's (limit 999 on a 300/min plan)
  const own = await api(port, ca, key, { path: '/v1/pets/own-fields' });
  t.equal(own.status, 200);
  t.equal(own.headers['x-ratelimit-limit'], pet.headers['x-ratelimit-limit'], "Portico's limit, not the upstream's");
  t.equal(Number(own.headers['x-ratelimit-remaining']), Number(pet.headers['x-ratelimit-remaining']) - 2, "Portico's count (store/orders and this call since)");
  t.equal(own.headers['x-ratelimit-reset'], pet.headers['x-ratelimit-reset']);
  t.equal(own.headers['retry-after'], '7', "the upstream's own Retry-After passes where Portico set none (a 503 of its own)");
  t.equal(own.headers.deprecation, pet.headers.deprecation, "Portico's Deprecation");
  t.match(own.headers.link, /rel="deprecation".*, <https:\/\/upstream\.example\/pets\?page=2>; rel="next"$/, "the upstream's Link follows Portico's");
});

t.test('HTTP/2 speaks the same API', async (t) => {
  const session = http2.connect(`https://api.localhost:${port}`, { ca, servername: 'api.localhost', host: '127.0.0.1' } as http2.SecureClientSessionOptions);
  t.teardown(() => session.close());
  const call = (headers: http2.OutgoingHttpHeaders, body?: string) =>
    new Promise<{ status: number; headers: http2.IncomingHttpHeaders; json: unknown }>((resolve, reject) => {
      const stream = session.request(headers);
      let text = '';
      let responseHeaders: http2.IncomingHttpHeaders = {};
      stream.on('response', (h) => (responseHeaders = h));
      stream.on('data', (c) => (text += c));
      stream.on('end', () => resolve({ status: Number(responseHeaders[':status']), headers: responseHeaders, json: JSON.parse(text) }));
      stream.on('error', reject);
      stream.end(body);
    });
  const created = await call({ ':method': 'POST', ':path': '/v1/categories', authorization: `Bearer ${key}`, 'content-type': 'application/json' }, '{"name":"H2"}');
  t.equal(created.status, 201);
  t.match(created.json, { name: 'H2' });
  const unauthorized = await call({ ':method': 'GET', ':path': '/v1/categories' });
  t.equal(unauthorized.status, 401);
  t.equal(unauthorized.headers.connection, undefined);
});

t.test('the OpenAPI description needs no key', async (t) => {
  const doc = await api(port, ca, null, { path: '/v1/openapi.json' });
  t.equal(doc.status, 200);
  t.match(doc.json, { openapi: /^3\./, paths: { '/categories': Object }, components: { schemas: { NewCategory: Object, Category: Object, Error: Object } } });
});

t.test('keys never reach the log', async (t) => {
  const text = portico.logs.join('\n');
  t.notMatch(text, /pk_(live|test)_[A-Za-z0-9_-]{20,}/, 'no key material');
  t.notMatch(text, /Bearer /i, 'no Authorization header');
  t.ok(portico.logs.some((l) => l.includes('"route":"api"') && l.includes(accountId)), 'access lines carry the account id');
});

t.test('bytes that are not UTF-8, control characters, and a client gone mid-body', async (t) => {
  const post = (body: Buffer | string) => api(port, ca, key, { method: 'POST', path: '/v1/categories', body, headers: { 'content-type': 'application/json' } });
  const invalid = Buffer.concat([Buffer.from('{"name":"caf'), Buffer.from([0xe9]), Buffer.from('"}')]);
  const refused = await post(invalid);
  expectError(t, refused, 400, 'invalid_request');
  t.match((refused.json as { message: string }).message, /not valid UTF-8/);
  expectError(t, await post(JSON.stringify({ name: 'null\u0000byte' })), 400, 'invalid_request');
  expectError(t, await post(JSON.stringify({ name: 'escape \u001b[31m' })), 400, 'invalid_request');
  expectError(t, await post(JSON.stringify({ name: 'ok', description: 'bell \u0007' })), 400, 'invalid_request');
  // a lone surrogate escape was stored, and the list became JSON that jq and serde_json refuse
  for (const body of ['{"name":"a\\ud800b"}', '{"name":"ok","description":"tail \\udfff"}']) {
    const lone = await post(body);
    expectError(t, lone, 400, 'invalid_request');
    t.match((lone.json as { message: string }).message, /valid Unicode text.*unpaired surrogate/, body);
  }
  t.equal((await post('{"name":"pair \\ud83d\\ude00"}')).status, 201, 'a surrogate pair (an emoji) is one character');
  // a name that shows as nothing, or as another name: a right-to-left override makes "txt.exe" read "exe.txt"
  for (const [name, why] of [['\u200b', /visible character/], ['\u200b\u2060\u00ad', /visible character/], ['report\u202etxt.exe', /bidirectional/], ['a\u2066b\u2069', /bidirectional/]] as const) {
    const answer = await post(JSON.stringify({ name }));
    expectError(t, answer, 400, 'invalid_request');
    t.match((answer.json as { message: string }).message, why, JSON.stringify(name));
  }
  t.equal((await post(JSON.stringify({ name: 'שלום \u200f(1)' }))).status, 201, 'right-to-left text with a direction mark');
  t.equal((await post(JSON.stringify({ name: 'co\u00adop' }))).status, 201, 'a soft hyphen inside a visible name');
  const lines = await post(JSON.stringify({ name: 'Café ☕', description: 'two\nlines\twith a tab' }));
  t.equal(lines.status, 201, 'UTF-8, and line breaks and tabs in a description');
  t.match(lines.json, { name: 'Café ☕', description: 'two\nlines\twith a tab' });

  // a body that stops halfway: the connection closes, nothing is logged as a failure of Portico's
  const before = portico.logs.length;
  await new Promise<void>((resolve) => {
    const session = http2.connect(`https://127.0.0.1:${port}`, { ca, servername: 'api.localhost' });
    const stream = session.request({ ':method': 'POST', ':path': '/v1/categories', ':authority': 'api.localhost', authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': '100' });
    stream.on('error', () => undefined);
    stream.write('{"name":"half');
    setTimeout(() => {
      stream.close(http2.constants.NGHTTP2_CANCEL);
      session.close();
      setTimeout(resolve, 300);
    }, 100);
  });
  t.notOk(portico.logs.slice(before).some((line) => line.includes('"level":50') || line.includes('request failed')), 'no error logged');
});
