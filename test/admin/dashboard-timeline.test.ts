// The dashboard's domain view in real headless Chromium against a real Portico, pebble and
// challtestsrv: a domain that verified by itself shows its timeline (added, DNS checks, verified,
// ordered, issued) in plain words, and a domain waiting behind a CA limit shows its queue position.
import t from 'tap';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import type { Browser } from 'playwright-core';
import { launchBrowser } from '../helpers/browser.ts';
import { ADMIN_TOKEN, startPortico } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';
import { startAcmePeers } from '../helpers/acme-peers.ts';

const SCREENSHOT = path.resolve(import.meta.dirname, '../artifacts/dashboard-timeline.png');

const launched = await launchBrowser();
if ('skip' in launched) t.plan(0, launched.skip);
else await run(launched.browser);

async function run(browser: Browser): Promise<void> {
  t.teardown(() => browser.close());
  const { dns, upstream, pebble, env: acmeEnv } = await startAcmePeers(t);
  const portico = await startPortico({
    ...acmeEnv,
    PORTICO_PENDING_RECHECK_MS: '300',
    // one new order per 3 h: the second domain has to wait in line
    PORTICO_ACME_NEW_ORDERS_PER_3H: '1',
  });
  t.teardown(() => portico.stop());
  const call = (method: string, p: string, body?: unknown) => admin(portico.ports.admin, method, p, body);
  const account = (await call('POST', '/admin/accounts', { plan: 'pro' })).json;
  const shop = (await call('POST', '/admin/projects', { accountId: account.id, name: 'shop', upstream: upstream.url })).json;
  const domainOf = async (hostname: string) => (await call('GET', `/admin/projects/${shop.id}/domains/${hostname}`)).json;
  const until = async (hostname: string, done: (d: { certificate: { status: string } }) => boolean) => {
    for (const deadline = Date.now() + 20_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
      if (done(await domainOf(hostname))) return;
    }
    throw new Error(`${hostname}: ${JSON.stringify(await domainOf(hostname))}`);
  };
  // nobody presses Verify: the records exist, the automatic checks find them
  await call('POST', `/admin/projects/${shop.id}/domains`, { hostname: 'first.example.com' });
  await dns.setCname('first.example.com', 'edge.localhost');
  await until('first.example.com', (d) => d.certificate.status === 'issued');
  await call('POST', `/admin/projects/${shop.id}/domains`, { hostname: 'second.example.com' });
  await dns.setCname('second.example.com', 'edge.localhost');
  await until('second.example.com', (d) => d.certificate.status === 'queued');

  const context = await browser.newContext({ viewport: { width: 1280, height: 1000 }, locale: 'en-GB', timezoneId: 'UTC' });
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  const problems: string[] = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (message) => void (message.type() === 'error' && problems.push(`console: ${message.text()}`)));
  await page.goto(`http://127.0.0.1:${portico.ports.admin}/`);
  await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
  await page.getByRole('button', { name: 'Continue', exact: true }).click();
  await page.getByRole('heading', { name: 'Domains', level: 1 }).waitFor();
  const row = (hostname: string) => page.locator(`tr[data-hostname="${hostname}"]`);
  const detail = (hostname: string) => page.locator(`tr[data-detail-of="${hostname}"]`);

  t.test('a queued certificate shows its place in line and when it is ordered', async (t) => {
    const cell = row('second.example.com').locator('td.cert');
    await cell.getByText('Queued', { exact: true }).waitFor();
    t.match(await cell.innerText(), /Queued\s+Place 1 in line for the certificate authority\s+Ordered by \d/);
  });

  t.test('the timeline tells, in plain words, what happened to a domain', async (t) => {
    await page.getByRole('button', { name: 'Show timeline of first.example.com' }).click();
    const list = detail('first.example.com').locator('ol.timeline');
    await list.waitFor();
    const items = await list.locator('li').allInnerTexts();
    const words = items.map((text) => text.split('\n').map((s) => s.trim()).filter(Boolean)[1]);
    t.same(words.slice().reverse().filter((w, i, all) => all.indexOf(w) === i).slice(0, 5), ['Added', 'DNS checked', 'Verified', 'Certificate ordered', 'Challenge answered'], 'oldest steps in order (shown newest first)');
    t.ok(words.includes('Certificate issued'), 'issuance is there');
    t.match(items.at(-1), /Added[\s\S]*Create these DNS records: CNAME first → edge\.localhost/, 'the first step says what to do');
    t.match(await list.locator('li time').first().getAttribute('datetime'), /^\d{4}-\d\d-\d\dT/);

    await page.getByRole('button', { name: 'Show timeline of second.example.com' }).click();
    await detail('second.example.com').locator('ol.timeline').getByText('Waiting for the CA').waitFor();
    t.match(await detail('second.example.com').locator('ol.timeline li').first().innerText(), /Waiting for the CA[\s\S]*place 1/i, 'why there is no certificate yet');
    mkdirSync(path.dirname(SCREENSHOT), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    await page.getByRole('button', { name: 'Hide timeline of first.example.com' }).click();
    t.equal(await detail('first.example.com').locator('ol.timeline').count(), 0, 'and it folds away');
    t.same(problems, [], 'no script errors');
  });
}
