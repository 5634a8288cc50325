// The dashboard at its edges, in real headless Chromium against a real Portico and challtestsrv DNS:
// a token fetch cannot send, hostnames of 245 characters, a redirect's Remove, a page left open
// while the CLI changes things, the poll and the owner's text selection, a domain removed elsewhere,
// and signing out while an action is still running. The page's clock is Playwright's: polls run when
// the test moves time on, not after real seconds. The admin API's own headers need no browser.
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Browser, Page, Request } from 'playwright-core';
import { launchBrowser } from '../helpers/browser.ts';
import { ADMIN_TOKEN, startPortico } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { admin } from '../helpers/client.ts';

const dns = await startChalltestsrv();
t.teardown(() => dns.stop());
const upstream = await startUpstream();
t.teardown(() => upstream.stop());
// no background DNS check changes a domain while the page is looked at
const portico = await startPortico({ PORTICO_DNS_SERVERS: dns.dnsServer, PORTICO_PENDING_RECHECK_MS: '3600000' });
t.teardown(() => portico.stop());
const call = (method: string, p: string, body?: unknown, token?: string | null) => admin(portico.ports.admin, method, p, body, token);

const account = (await call('POST', '/admin/accounts', { plan: 'pro' })).json;
const project = async (name: string) => (await call('POST', '/admin/projects', { accountId: account.id, name, upstream: upstream.url })).json as { id: string };

// every project is made, and the page opened, before the first test starts
const own = await project('headers');
// a 245-character hostname, a redirect to one, a CNAME pointing at one
const label = (c: string, n: number) => c.repeat(n);
const long = `${label('a', 63)}.${label('b', 63)}.${label('c', 63)}.${label('d', 49)}.com`;
const wide = await project('wide');
await call('POST', `/admin/projects/${wide.id}/domains`, { hostname: long });
await call('POST', `/admin/projects/${wide.id}/domains`, { hostname: 'from.example.com' });
await call('POST', `/admin/projects/${wide.id}/redirects`, { from: 'from.example.com', to: long.replace('aaa', 'zzz') });
await call('POST', `/admin/projects/${wide.id}/domains`, { hostname: 'cn.example.com' });
await dns.setCname('cn.example.com', `${label('e', 63)}.${label('f', 63)}.${label('g', 63)}.example`);
await call('POST', `/admin/projects/${wide.id}/domains/cn.example.com/verify`);
// pending domains: the page polls every 5 s
const shop = await project('shop');
for (const hostname of ['a.example.com', 'gone.example.com']) await call('POST', `/admin/projects/${shop.id}/domains`, { hostname });
// nothing pending: before, nothing was ever fetched again
const quiet = await project('quiet');
// 45 domains: before, one 17,000-pixel page
const many = await project('many');
for (let i = 0; i < 45; i++) await call('POST', `/admin/projects/${many.id}/domains`, { hostname: `many-${i}.example.com` });

const launched = await launchBrowser();
const tab = 'skip' in launched ? null : await open(launched.browser);

t.test('admin JSON answers are neither cached nor sniffed, refusals included', async (t) => {
  const answers = {
    'GET 200': await call('GET', '/admin/projects'),
    'POST 201': await call('POST', `/admin/projects/${own.id}/domains`, { hostname: 'headers.example.com' }),
    'DELETE 204': await call('DELETE', `/admin/projects/${own.id}/domains/headers.example.com`),
    'GET 404': await call('GET', `/admin/projects/${own.id}/domains/headers.example.com`),
    'POST 400': await call('POST', `/admin/projects/${own.id}/domains`, { hostname: 'localhost' }),
    '401 without a token': await call('GET', '/admin/projects', undefined, null),
    '401 with a wrong token': await call('GET', '/admin/projects', undefined, 'not-the-admin-token'),
  };
  for (const [name, answer] of Object.entries(answers)) {
    t.same([answer.headers['cache-control'], answer.headers['x-content-type-options']], ['no-store', 'nosniff'], `${name} (${answer.status})`);
  }
});

if ('skip' in launched) t.test('the page', (t) => t.plan(0, launched.skip));
else pageTests(tab!);

async function open(browser: Browser): Promise<Page> {
  t.teardown(() => browser.close());
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, locale: 'en-GB', timezoneId: 'UTC' });
  // the page's timers stand still unless the test moves them
  await context.clock.install({ time: new Date('2026-06-01T12:00:00Z') });
  await context.clock.pauseAt(new Date('2026-06-01T12:00:01Z'));
  const tab = await context.newPage();
  tab.setDefaultTimeout(10_000);
  return tab;
}

function pageTests(tab: Page): void {
  const problems: string[] = [];
  tab.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  const requests: Request[] = [];
  tab.on('request', (request) => void requests.push(request));
  const button = (name: string) => tab.getByRole('button', { name, exact: true });
  const row = (hostname: string) => tab.locator(`tr[data-hostname="${hostname}"]`);
  const projectPath = (id: string) => `/admin/projects/${id}`;
  // the page's own timers (and animation frames) are paused: real time, for its fetch answers to land
  const settle = () => sleep(300);
  // the next poll, made by moving the page's clock on by `ms`; resolves once its answer is in the page
  const poll = async (id: string, ms: number) => {
    const answered = tab.waitForEvent('requestfinished', (r) => new URL(r.url()).pathname === projectPath(id));
    await tab.clock.fastForward(ms);
    await answered;
    await settle();
  };
  const select = async (id: string) => {
    const loaded = tab.waitForResponse((r) => new URL(r.url()).pathname === projectPath(id));
    await tab.getByLabel('Project').selectOption(id);
    await loaded;
  };

  t.test('a token with a character no header can carry is refused before anything is sent', async (t) => {
    await tab.goto(`http://127.0.0.1:${portico.ports.admin}/`);
    await tab.getByLabel('Admin token').fill('admin-token-€-2024-long');
    await button('Continue').click();
    const error = tab.locator('#token-error');
    await error.waitFor();
    t.match(await error.innerText(), /can only contain printable ASCII characters[\s\S]*"€"/);
    t.equal(requests.filter((r) => r.url().includes('/admin/')).length, 0, 'no request');
    await tab.getByLabel('Admin token').fill(ADMIN_TOKEN);
    await button('Continue').click();
    await tab.getByLabel('Project').waitFor();
  });

  t.test('long hostnames wrap: the buttons and the page stay within 1280 px', async (t) => {
    await select(wide.id);
    await row(long).waitFor();
    for (const open of [/^Show timeline of /, /^Show DNS records of /]) {
      while (await tab.getByRole('button', { name: open }).count()) await tab.getByRole('button', { name: open }).first().click();
    }
    await tab.locator('ol.timeline').first().waitFor();
    const sizes = await tab.evaluate<{ page: number[]; tables: number[][]; buttons: number[] }>(`({
      page: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
      tables: [...document.querySelectorAll('.table-wrap')].map((w) => [w.scrollWidth, w.clientWidth]),
      buttons: [...document.querySelectorAll('td.actions .btn')].map((b) => Math.round(b.getBoundingClientRect().right)),
    })`);
    t.ok(sizes.page[0] <= sizes.page[1], `the page is not wider than the window: ${sizes.page}`);
    t.ok(sizes.tables.every(([scroll, client]) => scroll <= client), `no table scrolls sideways: ${JSON.stringify(sizes.tables)}`);
    t.equal(sizes.buttons.length, 7, 'Verify and Remove of each of the 3 domains, Remove of the redirect');
    t.ok(sizes.buttons.every((right) => right <= 1280), `every button is on screen: ${sizes.buttons}`);

    await button(`Remove ${long}`).click();
    const dialog = tab.getByRole('dialog');
    await dialog.waitFor();
    const warning = await tab.locator('#remove-warning').evaluate((p) => [p.scrollWidth, p.clientWidth, Math.round(p.getBoundingClientRect().right)]);
    t.ok(warning[0] <= warning[1] && warning[2] <= 1280, `the dialog's warning wraps: ${warning}`);
    await button('Cancel').click();
    await dialog.waitFor({ state: 'hidden' });
  });

  t.test('removing a redirect asks first', async (t) => {
    const dialog = tab.getByRole('dialog');
    await button('Remove redirect from from.example.com').click();
    await dialog.waitFor({ timeout: 3000 });
    t.match(await dialog.innerText(), /Remove the redirect from from\.example\.com\?[\s\S]*stops redirecting to zzz/);
    t.equal(await dialog.getByRole('button', { name: 'Remove redirect' }).count(), 1);
    await button('Cancel').click();
    await dialog.waitFor({ state: 'hidden' });
    t.equal((await call('GET', projectPath(wide.id))).json.redirects.length, 1, 'cancel keeps it');
    await button('Remove redirect from from.example.com').click();
    await dialog.getByRole('button', { name: 'Remove redirect' }).click();
    await tab.getByText('No redirects.').waitFor();
    t.same((await call('GET', projectPath(wide.id))).json.redirects, []);
    t.equal(await row('from.example.com').count(), 1, 'the domain stays');
  });

  t.test('the poll keeps what the owner selected, and shows new data once nothing is selected', async (t) => {
    await select(shop.id);
    const value = tab.locator('tr[data-detail-of="a.example.com"] td.value span.mono');
    await value.selectText();
    const selected = () => tab.evaluate<string>('String(getSelection())');
    t.equal(await selected(), 'edge.localhost');
    await poll(shop.id, 5_000);
    t.equal(await selected(), 'edge.localhost', 'nothing changed: the rows stay as they are');

    await call('POST', `/admin/projects/${shop.id}/domains`, { hostname: 'cli.example.com' });
    await poll(shop.id, 5_000);
    t.equal(await selected(), 'edge.localhost', 'a change waits while text is selected');
    t.equal(await row('cli.example.com').count(), 0);
    await tab.evaluate('getSelection().removeAllRanges()');
    await poll(shop.id, 5_000);
    await row('cli.example.com').waitFor();
  });

  t.test('a Verify on a domain removed elsewhere says so', async (t) => {
    await call('DELETE', `/admin/projects/${shop.id}/domains/gone.example.com`);
    await button('Verify gone.example.com').click();
    const notice = tab.locator('#domains-notice');
    await notice.getByText('gone.example.com is no longer a domain of this project').waitFor({ timeout: 3000 });
    t.match(await notice.innerText(), /removed elsewhere/);
    t.equal(await row('gone.example.com').count(), 0, 'and its row is gone');
  });

  t.test('with nothing pending the page still follows changes, and looks again on return', async (t) => {
    await select(quiet.id);
    await tab.getByText('No custom domains yet').waitFor();
    await call('POST', `/admin/projects/${quiet.id}/domains`, { hostname: 'later.example.com' });
    await poll(quiet.id, 30_000);
    t.equal(await row('later.example.com').count(), 1, 'shown within 30 s');

    await call('DELETE', `/admin/projects/${quiet.id}/domains/later.example.com`);
    let answered = tab.waitForResponse((r) => new URL(r.url()).pathname === projectPath(quiet.id), { timeout: 3000 });
    await tab.evaluate(`document.dispatchEvent(new Event('visibilitychange'))`);
    await answered;
    await row('later.example.com').waitFor({ state: 'detached' });

    await call('POST', `/admin/projects/${quiet.id}/domains`, { hostname: 'back.example.com' });
    answered = tab.waitForResponse((r) => new URL(r.url()).pathname === projectPath(quiet.id), { timeout: 3000 });
    await tab.evaluate(`window.dispatchEvent(new Event('focus'))`);
    await answered;
    await row('back.example.com').waitFor();
  });

  t.test('many domains: pages of 20 and a filter, kept by the poll; an added domain is shown on the last page', async (t) => {
    await select(many.id);
    await row('many-0.example.com').waitFor();
    const rows = () => tab.locator('tr[data-hostname]').count();
    const range = tab.locator('#domains-range');
    const filter = tab.getByLabel('Filter domains');
    t.equal(await rows(), 20, 'the first page: 20 domains');
    t.equal(await range.innerText(), '1–20 of 45');
    t.ok(await button('Previous').isDisabled(), 'no page before the first');
    await button('Next').click();
    t.equal(await range.innerText(), '21–40 of 45');
    await row('many-20.example.com').waitFor();
    await button('Next').click();
    t.equal(await range.innerText(), '41–45 of 45');
    t.equal(await rows(), 5, 'the last page: the 5 left');
    t.ok(await button('Next').isDisabled(), 'no page after the last');

    await filter.fill('MANY-1.');
    t.equal(await range.innerText(), '1–1 of 1 matching', 'part of a hostname, in any case');
    await row('many-1.example.com').waitFor();
    await filter.fill('many-1');
    t.equal(await range.innerText(), '1–11 of 11 matching', 'many-1 and many-10 to many-19');
    t.notOk(await tab.locator('#domains-pages').isVisible(), 'one page: no page buttons');
    await filter.fill('pending');
    t.equal(await range.innerText(), '1–20 of 45 matching', 'a status word');
    await filter.fill('nothing-like-it');
    t.equal(await range.innerText(), 'No domain matches "nothing-like-it"');
    t.equal(await rows(), 0);
    t.notOk(await tab.locator('#domains-table').isVisible(), 'no empty table');

    await filter.fill('many-2');
    await call('POST', `/admin/projects/${many.id}/domains`, { hostname: 'many-2x.example.com' });
    await poll(many.id, 5_000);
    t.equal(await range.innerText(), '1–12 of 12 matching', 'a poll keeps the filter, and shows the new domain in it');

    await tab.getByLabel('Hostname').fill('zz-added.example.com');
    await button('Add domain').click();
    await row('zz-added.example.com').waitFor();
    t.equal(await filter.inputValue(), '', 'adding clears the filter');
    t.equal(await range.innerText(), '41–47 of 47', 'and shows the last page, with the domain added');

    await select(quiet.id);
    await tab.locator('#crumb-project', { hasText: 'quiet' }).waitFor();
    t.notOk(await tab.locator('#domains-list-controls').isVisible(), 'a project with few domains has no list controls');
    await select(many.id);
    await row('many-0.example.com').waitFor();
    t.equal(await range.innerText(), '1–20 of 47', 'back on the project: its first page');
    t.same(problems, [], 'no script errors');
  });

  t.test('signing out while an action runs: its answer changes nothing, nothing else is sent', async (t) => {
    await select(shop.id);
    // Verify's answer is held back until the owner has signed out and started typing another token
    let release = () => {};
    const held = new Promise<void>((resolve) => { release = resolve; });
    await tab.route('**/domains/a.example.com/verify', async (route) => { await held; await route.continue(); });
    const sent = tab.waitForRequest((r) => r.url().endsWith('/domains/a.example.com/verify'));
    await button('Verify a.example.com').click();
    await sent;
    const before = requests.length;
    await button('Forget token').click();
    await tab.getByLabel('Admin token').pressSequentially('half-typed');
    const answered = tab.waitForResponse((r) => r.url().endsWith('/domains/a.example.com/verify'));
    release();
    await answered;
    await settle();
    await tab.clock.fastForward(60_000);
    await settle();

    t.same(requests.slice(before).map((r) => `${r.method()} ${r.url()} ${r.headers().authorization}`), [], 'no request after signing out');
    t.equal(await tab.getByLabel('Admin token').inputValue(), 'half-typed', 'what the owner typed is kept');
    t.equal(await tab.locator('#token-error').isVisible(), false, 'no complaint about a token');
    t.equal(await tab.locator('#login').isVisible(), true);
    t.same(await tab.evaluate('({ ...sessionStorage })'), {}, 'neither the token nor the project is kept');
    t.equal(await tab.locator('#domains tr, #redirects tr').count(), 0, 'no rows of the project stay in the page');
    t.equal(await tab.locator('#crumb-project').textContent(), '');
    t.same(problems, [], 'no script errors');
  });
}
