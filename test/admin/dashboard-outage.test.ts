// The dashboard through a Redis outage, in real headless Chromium against Portico on a real
// redis-server frozen with SIGSTOP (every command times out, the admin API answers 503) and thawed
// with SIGCONT:
// - start-never-retried: a page loaded while the admin API answered 503 showed the error and never
//   asked again, neither on the poll's rhythm nor when the owner came back to the tab;
// - action-error-lost: a Verify answered 503 lost its error when the refresh after it failed too;
// - switch-keeps-old-tables: a project switch answered 503 left the last project's tables in view;
// - signin-during-outage: a sign-in answered 503 stayed on the sign-in form and never asked again.
// The page's clock is Playwright's: polls run when the test moves time on, not after real seconds.
import t, { type Test } from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { launchBrowser } from '../helpers/browser.ts';
import { ADMIN_TOKEN, startPortico, type Instance } from '../helpers/portico.ts';
import { startChalltestsrv } from '../helpers/challtestsrv.ts';
import { startRedis } from '../helpers/redis.ts';
import { startUpstream } from '../helpers/upstream.ts';
import { admin } from '../helpers/client.ts';

const launched = await launchBrowser();
if ('skip' in launched) t.plan(0, launched.skip);
else await run(launched.browser);

async function run(browser: Browser): Promise<void> {
  t.teardown(() => browser.close());
  const redis = await startRedis();
  t.teardown(() => { redis.process.kill('SIGCONT'); return redis.stop(); });
  const freeze = () => void redis.process.kill('SIGSTOP');
  const thaw = () => void redis.process.kill('SIGCONT');
  const dns = await startChalltestsrv();
  t.teardown(() => dns.stop());
  const upstream = await startUpstream();
  t.teardown(() => upstream.stop());
  // two instances on one Redis: each page opens on an instance that has never answered a read, so
  // none is answered from an instance's last copy (DESIGN §8) while Redis is frozen
  const env = { PORTICO_REDIS_URL: redis.url, PORTICO_DNS_SERVERS: dns.dnsServer, PORTICO_PENDING_RECHECK_MS: '3600000' };
  const a = await startPortico(env);
  t.teardown(() => a.stop());
  const b = await startPortico(env);
  t.teardown(() => b.stop());

  const account = (await admin(a.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).json;
  const project = (await admin(a.ports.admin, 'POST', '/admin/projects', { accountId: account.id, name: 'back', upstream: upstream.url })).json;
  const added = await admin(a.ports.admin, 'POST', `/admin/projects/${project.id}/domains`, { hostname: 'back.example.com' });
  if (added.status !== 201) throw new Error(`adding back.example.com: ${added.status} ${added.text}`);

  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, locale: 'en-GB', timezoneId: 'UTC' });
  // the page's timers stand still unless the test moves them
  await context.clock.install({ time: new Date('2026-06-01T12:00:00Z') });
  await context.clock.pauseAt(new Date('2026-06-01T12:00:01Z'));
  // signed in before: the token is in the tab's sessionStorage when the page loads
  await context.addInitScript((token: string) => sessionStorage.setItem('portico.adminToken', token), ADMIN_TOKEN);
  const problems: string[] = [];

  /** until `instance` answers the project list again (Redis thawed and reconnected) */
  const answering = async (instance: Instance) => {
    for (let i = 0; i < 100; i++) {
      if ((await admin(instance.ports.admin, 'GET', '/admin/projects')).status === 200) return;
      await sleep(100);
    }
    throw new Error('Portico did not answer again after Redis came back');
  };
  /** the page on `instance` with Redis frozen: it shows the admin API's 503 and no project */
  const openDuringOutage = async (t: Test, instance: Instance, tab: Page) => {
    freeze();
    const refused = await admin(instance.ports.admin, 'GET', '/admin/projects');
    t.equal(refused.status, 503, 'the admin API cannot answer with Redis frozen');
    await tab.goto(`http://127.0.0.1:${instance.ports.admin}/`);
    await tab.locator('#app-error').getByText(refused.json.message).waitFor({ timeout: 20_000 });
    t.equal(await tab.locator('tr[data-hostname]').count(), 0, 'no project shown');
    thaw();
    await answering(instance);
  };
  const listed = (tab: Page) => tab.waitForRequest((r) => new URL(r.url()).pathname === '/admin/projects', { timeout: 5000 });
  const watched = async (ctx: BrowserContext) => {
    const tab = await ctx.newPage();
    tab.setDefaultTimeout(10_000);
    tab.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
    return tab;
  };

  const tabA = await watched(context);

  t.test('start-never-retried: a page loaded during the outage loads on the next poll once Redis is back', async (t) => {
    await openDuringOutage(t, a, tabA);
    const asked = listed(tabA);
    await tabA.clock.fastForward(5_000);
    await asked;
    await tabA.locator('tr[data-hostname="back.example.com"]').waitFor();
    t.equal(await tabA.locator('#app-error').isVisible(), false, 'the error is gone');
    t.equal(await tabA.getByLabel('Project').inputValue(), project.id, 'its only project is opened');
  });

  t.test('start-never-retried: ... and at once when the owner comes back to the tab', async (t) => {
    const tabB = await watched(context);
    await openDuringOutage(t, b, tabB);
    const asked = listed(tabB);
    await tabB.evaluate(`window.dispatchEvent(new Event('focus'))`);
    await asked;
    await tabB.locator('tr[data-hostname="back.example.com"]').waitFor();
    t.equal(await tabB.locator('#app-error').isVisible(), false);
    await tabB.close();
  });

  t.test('action-error-lost: a Verify refused during the outage says why on its row', async (t) => {
    const verify = tabA.getByRole('button', { name: 'Verify back.example.com', exact: true });
    freeze();
    try {
      await verify.click();
      // the change waits for its turn (up to 6 s) before the 503; the refresh after it fails too
      await tabA.locator('[data-focus="verify:back.example.com"]:not([disabled])').filter({ hasText: /^Verify$/ }).waitFor({ timeout: 30_000 });
      const notice = tabA.locator('tr[data-detail-of="back.example.com"] .notice.error');
      await notice.waitFor({ timeout: 3000 });
      t.match(await notice.innerText(), /state store/i, 'the 503 stays on the row it belongs to');
      t.ok(await tabA.locator('#app-error').isVisible(), 'and the failed refresh is said above');
    } finally {
      thaw();
    }
    await answering(a);
    const asked = tabA.waitForRequest((r) => new URL(r.url()).pathname === `/admin/projects/${project.id}`, { timeout: 5000 });
    await tabA.clock.fastForward(5_000);
    await asked;
    await tabA.locator('#app-error').waitFor({ state: 'hidden' });
  });

  t.test('switch-keeps-old-tables: a project that cannot be opened leaves no other project\'s tables in view', async (t) => {
    // made through the other instance: this one has never read it, so has no copy to answer from
    const other = (await admin(b.ports.admin, 'POST', '/admin/projects', { accountId: account.id, name: 'other', upstream: upstream.url })).json;
    await tabA.reload();
    await tabA.locator('tr[data-hostname="back.example.com"]').waitFor();
    freeze();
    try {
      const refused = tabA.waitForResponse((r) => new URL(r.url()).pathname === `/admin/projects/${other.id}`, { timeout: 30_000 });
      await tabA.getByLabel('Project').selectOption(other.id);
      t.equal((await refused).status(), 503, 'the project cannot be read');
      await tabA.locator('#app-error').waitFor();
      t.equal(await tabA.locator('#project-view').isVisible(), false, "the last project's tables are not shown under this one's name");
      t.equal(await tabA.locator('tr[data-hostname="back.example.com"]').isVisible(), false, 'nor its domains, whose buttons would act on the project selected');
    } finally {
      thaw();
    }
    await answering(a);
    // the poll asks again every 5 s until the project is read (the instance's state connection may take
    // a moment longer than its project list)
    for (let i = 0; i < 20; i++) {
      const asked = tabA.waitForResponse((r) => new URL(r.url()).pathname === `/admin/projects/${other.id}`, { timeout: 5000 });
      await tabA.clock.fastForward(5_000);
      if ((await asked).status() === 200) break;
      await sleep(250);
    }
    await tabA.locator('#domains-empty').waitFor();
    t.equal(await tabA.locator('#crumb-project').innerText(), 'other', 'the project selected opens once Portico answers');
  });

  t.test('signin-during-outage: a sign-in answered 503 signs in, says why, and opens the projects once Redis is back', async (t) => {
    // an admin write drops every instance's last answers: the sign-in's read cannot be answered from one
    t.equal((await admin(a.ports.admin, 'POST', '/admin/accounts', { plan: 'pro' })).status, 201);
    // a tab of its own, with no token saved: the owner signs in by hand
    const fresh = await browser.newContext({ viewport: { width: 1280, height: 900 }, locale: 'en-GB', timezoneId: 'UTC' });
    t.teardown(() => fresh.close());
    await fresh.clock.install({ time: new Date('2026-06-01T12:00:00Z') });
    await fresh.clock.pauseAt(new Date('2026-06-01T12:00:01Z'));
    const tab = await watched(fresh);
    await tab.goto(`http://127.0.0.1:${a.ports.admin}/`);
    freeze();
    try {
      const refused = tab.waitForResponse((r) => new URL(r.url()).pathname === '/admin/projects', { timeout: 30_000 });
      await tab.getByLabel('Admin token').fill(ADMIN_TOKEN);
      await tab.getByRole('button', { name: 'Continue', exact: true }).click();
      t.equal((await refused).status(), 503, 'the projects cannot be read');
      await tab.locator('#app-error').waitFor();
      t.match(await tab.locator('#app-error').innerText(), /state store/i, 'the page says why');
      t.equal(await tab.locator('#login').isVisible(), false, 'signed in: the token was taken');
      t.equal(await tab.evaluate(`sessionStorage.getItem('portico.adminToken')`), ADMIN_TOKEN, 'and kept for a reload');
    } finally {
      thaw();
    }
    await answering(a);
    for (let i = 0; i < 20 && !(await tab.locator('tr[data-hostname="back.example.com"]').isVisible()); i++) {
      await tab.clock.fastForward(5_000);
      await sleep(250);
    }
    await tab.getByLabel('Project').waitFor();
    t.equal(await tab.locator('#app-error').isVisible(), false, 'the projects are read on the poll once Redis is back; the error is gone');
  });

  t.test('no script errors', async (t) => {
    t.same(problems, []);
  });
}
