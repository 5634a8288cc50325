// Regression: every reload (SIGHUP, POST /admin/reload) built the two admin handlers again and each
// subscribed to change notices anew, with no way back: after N reloads every change notice ran 2 × N
// callbacks and every earlier handler (its closures, its cached answers) stayed reachable. The admin
// answers are now one cache for the process, subscribed once. A real Portico on real embedded state;
// the only thing watched is how often the store is subscribed to.
import t from 'tap';
import { loadConfig } from '../../src/config.ts';
import { createLogger } from '../../src/log.ts';
import * as embedded from '../../src/state/embedded.ts';
import path from 'node:path';
import { baseEnv, cleanup } from '../helpers/portico.ts';
import { admin } from '../helpers/client.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
let subscriptions = 0;
const { serve } = await t.mockImport<typeof import('../../src/main.ts')>('../../src/main.ts', {
  '../../src/state/embedded.ts': {
    ...embedded,
    openEmbeddedStores: async (...args: Parameters<typeof embedded.openEmbeddedStores>) => {
      const stores = await embedded.openEmbeddedStores(...args);
      const subscribe = stores.events.subscribe.bind(stores.events);
      stores.events.subscribe = (handler) => {
        subscriptions++;
        subscribe(handler);
      };
      return stores;
    },
  },
});

t.test('reloads add no change-notice subscriptions, and admin answers stay fresh across them', async (t) => {
  const env = baseEnv({});
  t.teardown(() => cleanup(env.PORTICO_DATA_DIR, env.PORTICO_CERTS_DIR));
  const running = await serve(loadConfig(env, ROOT), createLogger('silent'), { ...process.env, ...env });
  t.teardown(() => running.stop());
  const port = running.listeners.ports().admin;
  const afterStart = subscriptions;
  t.ok(afterStart > 0, `${afterStart} subscriptions at start`);

  const account = (await admin(port, 'POST', '/admin/accounts', { plan: 'free' })).json;
  t.equal((await admin(port, 'GET', `/admin/accounts/${account.id}`)).json.plan, 'free', 'read once (kept for an outage)');
  for (let i = 0; i < 20; i++) t.equal((await admin(port, 'POST', '/admin/reload')).status, 200);
  t.equal(subscriptions, afterStart, 'twenty reloads later, not one more subscription');

  t.equal((await admin(port, 'PATCH', `/admin/accounts/${account.id}`, { plan: 'pro' })).status, 200);
  t.equal((await admin(port, 'GET', `/admin/accounts/${account.id}`)).json.plan, 'pro', 'a change after the reloads is read, not an answer kept from before');
});
