// Regression (ca-text-uncut): a CA's problem detail reached the domain's certificate.lastError, its
// timeline, the log and the dashboard whole: 3077 characters, a raw newline and a U+202E that flips
// the text after it. The CA quotes what the validated host answered, so it is untrusted: an order's
// failure is cut and its controls, separators and bidi marks written as escapes, as DNS answers are.
// The class itself (pure), a hostile CA through a real Portico, and a real failure from pebble.
import t from 'tap';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { IssueError } from '../../src/certs/issue-error.ts';
import { createAcmeIssuer, type ChallengeStore } from '../../src/certs/acme-issuer.ts';
import { startPortico } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startPebble } from '../helpers/pebble.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { freePort } from '../helpers/free-port.ts';
import { admin } from '../helpers/client.ts';

// what the tester's CA sent: markup, 3000 characters without a break, a newline and a bidi override
const HOSTILE = `<img src=x onerror=window.__pwned=3>${'Z'.repeat(3000)}\n\u202eline2`;
// the characters kept of a CA's words (README, certificates)
const SHOWN_ISSUE_ERROR_CHARS = 500;
const RAW = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

t.test('the message is cut, saying how long it was, with its controls and bidi marks escaped', async (t) => {
  const said = `registering the ACME account: ${HOSTILE}`;
  const err = new IssueError('ca', said, { problemType: 'urn:ietf:params:acme:error:malformed' });
  t.equal(err.message, `${said.slice(0, SHOWN_ISSUE_ERROR_CHARS)}… (${said.length} characters)`);
  t.match(err.message, /^registering the ACME account: <img src=x onerror=window\.__pwned=3>Z+… \(3073 characters\)$/);
  t.notMatch(err.message, RAW);
  t.match(err, { kind: 'ca', problemType: 'urn:ietf:params:acme:error:malformed', name: 'IssueError' });

  const short = new IssueError('challenge', 'fetching http://shop.example.com/.well-known/acme-challenge/x: got "ok\nVerified\u202e" (\u0007)');
  t.equal(short.message, 'fetching http://shop.example.com/.well-known/acme-challenge/x: got "ok\\nVerified\\u202e" (\\x07)', 'a short one is whole, escaped');
  t.equal(new IssueError('caa', 'CAA records for shop.example.com do not allow letsencrypt.org (letsencrypt.org)').message,
    'CAA records for shop.example.com do not allow letsencrypt.org (letsencrypt.org)', 'plain text is left as it is');
});

t.test('a hostile CA: lastError and the timeline get the cut, escaped text', async (t) => {
  // an ACME server whose directory works and whose every POST answers that problem
  const ca = http.createServer((req, res) => {
    const base = `http://127.0.0.1:${(ca.address() as AddressInfo).port}`;
    const nonce = () => res.setHeader('replay-nonce', `n${Math.random().toString(36).slice(2)}`);
    if (req.url === '/dir') {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ newNonce: `${base}/nonce`, newAccount: `${base}/acct`, newOrder: `${base}/order` }));
      return;
    }
    if (req.url === '/nonce') {
      nonce();
      res.statusCode = req.method === 'HEAD' ? 200 : 204;
      res.end();
      return;
    }
    req.resume();
    req.on('end', () => {
      nonce();
      res.statusCode = 400;
      res.setHeader('content-type', 'application/problem+json');
      res.end(JSON.stringify({ type: 'urn:ietf:params:acme:error:malformed', detail: HOSTILE }));
    });
  });
  await new Promise<void>((resolve) => ca.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => { ca.closeAllConnections(); ca.close(() => resolve()); }));
  const dns = await startChalltestsrv();
  t.teardown(() => dns.stop());
  const upstream = await startUpstream();
  t.teardown(() => upstream.stop());
  const portico = await startPortico({ PORTICO_DNS_SERVERS: dns.dnsServer, PORTICO_ACME_DIRECTORY: `http://127.0.0.1:${(ca.address() as AddressInfo).port}/dir` });
  t.teardown(() => portico.stop());
  const call = (method: string, p: string, body?: unknown) => admin(portico.ports.admin, method, p, body);
  const account = (await call('POST', '/admin/accounts', { plan: 'pro' })).json;
  const project = (await call('POST', '/admin/projects', { accountId: account.id, name: 'hostile', upstream: upstream.url })).json;
  const domain = `/admin/projects/${project.id}/domains/shop.example.com`;
  await call('POST', `/admin/projects/${project.id}/domains`, { hostname: 'shop.example.com' });
  await dns.setCname('shop.example.com', 'edge.localhost');
  t.equal((await call('POST', `${domain}/verify`)).json.status, 'verified');

  let certificate: { status: string; lastError?: string } = { status: 'none' };
  for (const deadline = Date.now() + 20_000; certificate.status !== 'failed' && Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
    certificate = (await call('GET', domain)).json.certificate;
  }
  t.equal(certificate.status, 'failed');
  const lastError = certificate.lastError ?? '';
  t.match(lastError, /^ca: .*: <img src=x onerror=window\.__pwned=3>Z+… \(\d{4} characters\)$/, 'the start of what the CA said, then its length');
  t.ok(lastError.length < SHOWN_ISSUE_ERROR_CHARS + 40, `lastError is ${lastError.length} characters`);
  t.notMatch(lastError, RAW);
  const failed = ((await call('GET', `${domain}/events`)).json as Array<{ type: string; message: string }>).filter((e) => e.type === 'order_failed');
  t.ok(failed.length > 0, 'an order_failed event');
  for (const event of failed) {
    t.ok(event.message.length < SHOWN_ISSUE_ERROR_CHARS + 100, `order_failed event: ${event.message.length} characters`);
    t.notMatch(event.message, RAW);
  }
  const logged = portico.logs.filter((line) => line.includes('certificate order failed'));
  t.ok(logged.length > 0, 'the failure is logged');
  for (const line of logged) t.ok(line.length < 2000 && !line.includes('\u202e'), `the log line is cut too (${line.length} characters), without the bidi mark`);
});

t.test('a real failure from pebble reads as it did: whole, nothing escaped', async (t) => {
  const dns = await startChalltestsrv();
  t.teardown(() => dns.stop());
  const pebble = await startPebble({ httpPort: await freePort(), dnsServer: dns.dnsServer });
  t.teardown(() => pebble.stop());
  let pem: string | null = null;
  const challenges: ChallengeStore = { async set() {}, async remove() {} };
  const issuer = createAcmeIssuer({
    directoryUrl: pebble.directoryUrl, email: null, ca: pebble.caCertPem, challenges,
    accountKeys: { load: async () => pem, save: async (value) => { pem = value; } },
  });
  const err = await issuer.issue('nowhere.example.com').then(() => null, (e: unknown) => e);
  t.ok(err instanceof IssueError, String(err));
  const message = (err as IssueError).message;
  t.comment(message);
  t.match(message, /nowhere\.example\.com.*could not resolve/, 'the step, the name and the reason');
  t.notMatch(message, /\\[nrtxu]|…/, 'no escape, not cut');
  t.ok(message.length < SHOWN_ISSUE_ERROR_CHARS, `${message.length} characters`);
});
