// What the dashboard's removal dialog says, per domain, in real headless Chromium against a real
// Portico with challtestsrv DNS and pebble issuing the certificates. Regression (removal-words): the
// dialog said "visitors get an error page instead of this project, and its certificate is deleted"
// for every domain: for a redirect domain (its visitors were being sent on), for a pending domain
// that was never served and has no certificate, and for a name another domain redirects to without
// saying that redirect then leads to a 404.
import t from 'tap';
import type { Browser } from 'playwright-core';
import { launchBrowser } from '../helpers/browser.ts';
import { ADMIN_TOKEN, startPortico } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';
import { startAcmePeers } from '../helpers/acme-peers.ts';

const launched = await launchBrowser();
if ('skip' in launched) t.plan(0, launched.skip);
else await run(launched.browser);

async function run(browser: Browser): Promise<void> {
  t.teardown(() => browser.close());
  const { dns, upstream, pebble, env: acmeEnv } = await startAcmePeers(t);
  const portico = await startPortico({
    ...acmeEnv,
    PORTICO_PENDING_RECHECK_MS: '300',
  });
  t.teardown(() => portico.stop());
  const call = (method: string, p: string, body?: unknown) => admin(portico.ports.admin, method, p, body);
  const account = (await call('POST', '/admin/accounts', { plan: 'pro' })).json;
  const shop = (await call('POST', '/admin/projects', { accountId: account.id, name: 'shop', upstream: upstream.url })).json;
  const domainOf = async (hostname: string) => (await call('GET', `/admin/projects/${shop.id}/domains/${hostname}`)).json;
  const issued = async (hostname: string) => {
    for (const deadline = Date.now() + 20_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
      if ((await domainOf(hostname)).certificate.status === 'issued') return;
    }
    throw new Error(`${hostname}: ${JSON.stringify(await domainOf(hostname))}`);
  };
  // shop is served with its certificate, www (verified, certificate too) redirects to it, and pending
  // has no DNS record yet
  for (const hostname of ['shop.example.com', 'www.example.com', 'pending.example.com']) await call('POST', `/admin/projects/${shop.id}/domains`, { hostname });
  await dns.setCname('shop.example.com', 'edge.localhost');
  await dns.setCname('www.example.com', 'edge.localhost');
  await issued('shop.example.com');
  await issued('www.example.com');
  const redirect = await call('POST', `/admin/projects/${shop.id}/redirects`, { from: 'www.example.com', to: 'shop.example.com', status: 308 });
  if (redirect.status !== 201) throw new Error(`the redirect: ${redirect.status} ${redirect.text}`);

  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, locale: 'en-GB', timezoneId: 'UTC' });
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  const problems: string[] = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  await page.goto(`http://127.0.0.1:${portico.ports.admin}/`);
  await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
  await page.getByRole('button', { name: 'Continue', exact: true }).click();
  await page.locator('tr[data-hostname="pending.example.com"]').waitFor();
  const dialog = page.getByRole('dialog');
  /** the dialog's warning and the line under it for `hostname`, then Cancel */
  const words = async (hostname: string) => {
    await page.getByRole('button', { name: `Remove ${hostname}`, exact: true }).click();
    await dialog.waitFor();
    const said = { warning: await page.locator('#remove-warning').innerText(), more: await page.locator('#remove-more').innerText() };
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await dialog.waitFor({ state: 'hidden' });
    return said;
  };

  t.test('a pending domain: never served, no certificate to delete', async (t) => {
    const said = await words('pending.example.com');
    t.equal(said.warning, 'pending.example.com is not verified, so it has never been served: no visitor notices its removal.');
    t.equal(said.more, 'To use it later you would have to add it again.');
  });

  t.test('a redirect domain: its visitors stop being sent on', async (t) => {
    const said = await words('www.example.com');
    t.equal(said.warning, 'The redirect from www.example.com to shop.example.com stops at once, everywhere: visitors of www.example.com get an error page instead of being sent on. Its certificate is deleted.');
    t.notMatch(said.warning, /instead of this project/);
  });

  t.test('a served domain another one redirects to: that redirect then leads to a 404', async (t) => {
    const said = await words('shop.example.com');
    t.equal(said.warning, 'Traffic on shop.example.com stops at once, everywhere: visitors get an error page instead of this project. Its certificate is deleted. '
      + 'www.example.com redirects to shop.example.com: that redirect will then lead to a 404 page. Remove or change it too.');
    t.equal(said.more, 'It is the primary domain: another verified domain becomes primary, if there is one. To serve it again you would have to add it and verify it again.');
  });

  t.test('confirming still removes it', async (t) => {
    await page.getByRole('button', { name: 'Remove pending.example.com', exact: true }).click();
    await dialog.getByRole('button', { name: 'Remove domain' }).click();
    await page.locator('tr[data-hostname="pending.example.com"]').waitFor({ state: 'detached' });
    t.equal((await call('GET', `/admin/projects/${shop.id}/domains/pending.example.com`)).status, 404);
    t.same(problems, [], 'no script errors');
  });
}
