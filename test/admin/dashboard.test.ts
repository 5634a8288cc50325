// The Domains dashboard in real headless Chromium against a real Portico (admin API, challtestsrv
// DNS): token → project → add a domain → its DNS record → verify with a diagnostic → fix DNS →
// verified → primary and redirects (removed after a confirmation) → remove after a confirmation that
// says traffic stops at once.
import t from 'tap';
import http from 'node:http';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Browser } from 'playwright-core';
import { dashboardCsp, dashboardPage } from '../../src/admin/dashboard.ts';
import { launchBrowser } from '../helpers/browser.ts';
import { ADMIN_TOKEN, startPortico } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { closedPort, startUpstream } from '../helpers/upstream.ts';
import { admin } from '../helpers/client.ts';

const SCREENSHOT = path.resolve(import.meta.dirname, '../artifacts/dashboard-domains.png');

const launched = await launchBrowser();
if ('skip' in launched) t.plan(0, launched.skip);
else await run(launched.browser);

async function run(browser: Browser): Promise<void> {
  t.teardown(() => browser.close());
  const dns = await startChalltestsrv();
  t.teardown(() => dns.stop());
  const upstream = await startUpstream();
  t.teardown(() => upstream.stop());
  // certificate orders go to a closed port: never the internet, and the page shows a failed attempt
  const portico = await startPortico({ PORTICO_DNS_SERVERS: dns.dnsServer, PORTICO_ACME_DIRECTORY: `http://127.0.0.1:${await closedPort()}/dir` });
  t.teardown(() => portico.stop());
  const call = (method: string, p: string, body?: unknown) => admin(portico.ports.admin, method, p, body);

  const account = (await call('POST', '/admin/accounts', { plan: 'pro' })).json;
  const shop = (await call('POST', '/admin/projects', { accountId: account.id, name: 'shop', upstream: upstream.url })).json;
  await call('POST', '/admin/projects', { accountId: account.id, name: 'blog', upstream: upstream.url });
  const domainsOf = async () => ((await call('GET', `/admin/projects/${shop.id}`)).json.domains as Array<{ hostname: string; primary: boolean; status: string }>);

  const base = await dashboardOrigin(portico.ports.admin);
  t.teardown(() => base.close());

  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, locale: 'en-GB', timezoneId: 'UTC' });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base.url });
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  const problems: string[] = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (message) => {
    // Chromium logs every 4xx fetch; the wrong token (401) and the invalid inputs (400) are on purpose
    if (message.type() === 'error' && !/Failed to load resource: .* status of 40[01]/.test(message.text())) problems.push(`console: ${message.text()}`);
  });

  const row = (hostname: string) => page.locator(`tr[data-hostname="${hostname}"]`);
  const detail = (hostname: string) => page.locator(`tr[data-detail-of="${hostname}"]`);
  const button = (name: string) => page.getByRole('button', { name, exact: true });
  const certificateFailed = (hostname: string) => row(hostname).locator('td.cert').getByText('Failed', { exact: true }).waitFor({ timeout: 20_000 });

  t.test('the token is asked once', async (t) => {
    await page.goto(base.url);
    await page.getByLabel('Admin token').fill('not-the-token');
    await button('Continue').click();
    await page.getByRole('alert').filter({ hasText: 'The admin token was not accepted' }).waitFor();
    await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
    await button('Continue').click();
    await page.getByLabel('Project').waitFor();
    t.equal(await page.evaluate<string | null>('sessionStorage.getItem("portico.adminToken")'), ADMIN_TOKEN, 'kept in sessionStorage');
    t.equal(await page.getByLabel('Project').locator('option').count(), 3, 'a placeholder and both projects');
  });

  t.test('picking the project opens Project settings → Domains', async (t) => {
    await page.getByLabel('Project').selectOption(shop.id);
    await page.getByRole('heading', { name: 'Domains', level: 1 }).waitFor();
    t.match(await page.getByRole('navigation', { name: 'Breadcrumb' }).innerText(), /shop[\s\S]*Project settings[\s\S]*Domains/);
    t.ok(await page.getByText('No custom domains yet').isVisible());
  });

  t.test('API errors are shown inline with their message', async (t) => {
    await page.getByLabel('Hostname').fill('localhost');
    await button('Add domain').click();
    const error = page.locator('#add-error');
    await error.waitFor();
    const expected = (await call('POST', `/admin/projects/${shop.id}/domains`, { hostname: 'localhost' })).json.message;
    t.equal(await error.innerText(), expected);
    t.equal(await page.getByLabel('Hostname').getAttribute('aria-invalid'), 'true');

    // the API echoes what was typed: it must arrive as text, never as markup
    const hostile = '<img src=x onerror="window.pwned=1">.example.com';
    await page.getByLabel('Hostname').fill(hostile);
    await button('Add domain').click();
    await error.getByText('<img src=x').waitFor();
    t.equal(await error.innerText(), (await call('POST', `/admin/projects/${shop.id}/domains`, { hostname: hostile })).json.message);
    t.equal(await error.locator('img').count(), 0);
    t.equal(await page.evaluate<unknown>('window.pwned'), undefined);
  });

  t.test('adding a domain shows the DNS record to create, with copy buttons', async (t) => {
    await page.getByLabel('Hostname').fill('shop.example.com');
    await button('Add domain').click();
    await row('shop.example.com').waitFor();
    t.equal(await page.locator('#add-error').isVisible(), false, 'the old error is gone');
    t.equal(await row('shop.example.com').locator('.badge').first().innerText(), 'Pending');
    const records = detail('shop.example.com').getByRole('table');
    const cells = records.locator('tbody tr').first().locator('td');
    const shown = [await cells.nth(0).innerText(), await cells.nth(1).innerText(), await cells.nth(2).locator('.mono').innerText(), await cells.nth(3).innerText()];
    t.same(shown, ['CNAME', 'shop', 'edge.localhost', '3600'], 'type, name, value, TTL');
    await button('Copy value edge.localhost').click();
    await detail('shop.example.com').getByRole('button', { name: 'Copy value edge.localhost' }).filter({ hasText: 'Copied' }).waitFor();
    t.equal(await page.evaluate<string>('navigator.clipboard.readText()'), 'edge.localhost', 'the value is on the clipboard');
  });

  t.test('verify shows the diagnostic in plain words until the DNS is right', async (t) => {
    await button('Verify shop.example.com').click();
    const diagnostic = detail('shop.example.com').getByRole('group', { name: 'DNS record not found yet' });
    await diagnostic.waitFor();
    t.match(await diagnostic.innerText(), /No CNAME record for shop\.example\.com was found yet[\s\S]*48 hours/);
    t.match(await diagnostic.innerText(), /cname_missing/);

    // a second domain, also waiting for DNS, then the screenshot of a busy Domains page
    await page.getByLabel('Hostname').fill('www.example.com');
    await button('Add domain').click();
    await row('www.example.com').waitFor();
    await dns.setCname('shop.example.com', 'edge.localhost');
    await button('Verify shop.example.com').click();
    await row('shop.example.com').getByText('Verified', { exact: true }).waitFor();
    t.ok(await row('shop.example.com').getByText('Primary', { exact: true }).isVisible(), 'the first verified domain becomes primary');
    t.ok(await detail('shop.example.com').getByText('is verified').isVisible());
    t.equal(await detail('shop.example.com').getByRole('table').count(), 0, 'records fold away once verified');
    await button('Verify www.example.com').click();
    await detail('www.example.com').getByRole('group', { name: 'DNS record not found yet' }).waitFor();
    // the certificate order goes to a closed port and fails: the page follows it until it settles
    await certificateFailed('shop.example.com');
    t.match(await row('shop.example.com').locator('td.cert').innerText(), /Failed[\s\S]*Next attempt/);
    mkdirSync(path.dirname(SCREENSHOT), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    t.same((await domainsOf()).map((d) => [d.hostname, d.status]).sort(), [['shop.example.com', 'verified'], ['www.example.com', 'pending']]);
  });

  t.test('make primary, add and remove a redirect', async (t) => {
    await dns.setCname('www.example.com', 'edge.localhost');
    await button('Verify www.example.com').click();
    await button('Make www.example.com primary').click();
    await row('www.example.com').getByText('Primary', { exact: true }).waitFor();
    t.equal(await row('shop.example.com').getByText('Primary', { exact: true }).count(), 0);
    t.same((await domainsOf()).filter((d) => d.primary).map((d) => d.hostname), ['www.example.com']);

    await page.getByLabel('From').selectOption('shop.example.com');
    await page.getByLabel('To', { exact: true }).fill('not a hostname');
    await button('Add redirect').click();
    await page.locator('#redirect-error').getByText('"to" must be a hostname').waitFor();
    await page.getByLabel('To', { exact: true }).fill('www.example.com');
    await page.getByLabel('Status').selectOption('308');
    await button('Add redirect').click();
    await button('Remove redirect from shop.example.com').waitFor();
    t.equal(await page.locator('#redirect-error').isVisible(), false);
    t.ok(await row('shop.example.com').getByText('Redirects → www.example.com (308)').isVisible());
    t.same((await call('GET', `/admin/projects/${shop.id}`)).json.redirects, [{ from: 'shop.example.com', to: 'www.example.com', status: 308 }]);
    await button('Remove redirect from shop.example.com').click();
    await page.getByRole('dialog').getByRole('button', { name: 'Remove redirect' }).click();
    await page.getByText('No redirects.').waitFor();
    t.same((await call('GET', `/admin/projects/${shop.id}`)).json.redirects, []);
  });

  t.test('remove asks first, saying that traffic stops at once', async (t) => {
    const dialog = page.getByRole('dialog');
    await button('Remove shop.example.com').click();
    await dialog.waitFor();
    t.match(await dialog.innerText(), /Traffic on shop\.example\.com stops at once/);
    await button('Cancel').click();
    await dialog.waitFor({ state: 'hidden' });
    t.ok(await row('shop.example.com').isVisible(), 'cancel keeps it');
    t.ok((await domainsOf()).some((d) => d.hostname === 'shop.example.com'));

    await button('Remove shop.example.com').click();
    await dialog.getByRole('button', { name: 'Remove domain' }).click();
    await row('shop.example.com').waitFor({ state: 'detached' });
    t.same((await domainsOf()).map((d) => d.hostname), ['www.example.com'], 'gone from the admin API too');
    t.equal((await call('GET', `/admin/projects/${shop.id}`)).json.domains.length, 1);
  });

  t.test('a reload keeps the token and the project', async (t) => {
    await page.reload();
    await row('www.example.com').waitFor();
    t.equal(await page.getByLabel('Admin token').isVisible(), false);
    t.equal(await page.getByLabel('Project').inputValue(), shop.id);
  });

  t.test('no script errors and no CSP violations', async (t) => {
    t.same(problems, []);
    const html = await page.content();
    t.notMatch(html, /<script[^>]+src=|<link[^>]+stylesheet/, 'no external resources');
  });
}

/**
 * Where the page is served: Portico's admin listener once GET / is wired there; until then a small
 * server here that serves dashboardPage() (with its CSP) at / and passes /admin/* to Portico, so the
 * page's same-origin fetches reach the real admin API.
 */
async function dashboardOrigin(adminPort: number): Promise<{ url: string; close(): Promise<void> }> {
  const own = await fetch(`http://127.0.0.1:${adminPort}/`).then(async (r) => (r.ok && (r.headers.get('content-type') ?? '').includes('text/html') ? r.text() : ''), () => '');
  if (own.includes('<title>Domains · Portico</title>')) return { url: `http://127.0.0.1:${adminPort}`, close: async () => {} };

  const server = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': dashboardCsp(), 'cache-control': 'no-store' });
      res.end(dashboardPage());
      return;
    }
    if (!req.url?.startsWith('/admin/')) {
      res.writeHead(404).end();
      return;
    }
    const forward = http.request({ host: '127.0.0.1', port: adminPort, method: req.method, path: req.url, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    forward.on('error', (err) => res.destroy(err));
    req.pipe(forward);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
