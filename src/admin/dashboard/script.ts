// Plain ES2020 for the browser. Kept free of backquotes so it can live in this String.raw literal.
// The admin token (admin-token.ts), the project picker (project-picker.ts), how the project's data is
// kept current (refresh.ts), a domain's rows and actions (domains.ts), the list's filter and pages
// (domain-list.ts) and the redirect actions (redirects.ts) are set into this literal where they stand.
import { ADMIN_TOKEN } from './admin-token.ts';
import { PROJECT_PICKER } from './project-picker.ts';
import { DOMAIN_ACTIONS, DOMAIN_ROWS } from './domains.ts';
import { DOMAIN_LIST } from './domain-list.ts';
import { REDIRECT_ACTIONS } from './redirects.ts';
import { PROJECT_REFRESH } from './refresh.ts';

export const SCRIPT = String.raw`
'use strict';
(() => {
  const TOKEN_KEY = 'portico.adminToken';
  const PROJECT_KEY = 'portico.projectId';
  const DIAGNOSTIC_TITLES = {
    cname_missing: 'DNS record not found yet',
    cname_mismatch: 'The DNS record points somewhere else',
    a_record_conflict: 'Another DNS record is in the way',
    apex_address_mismatch: 'The apex domain points somewhere else',
    caa_blocks_ca: 'A CAA record blocks our certificate authority',
    ownership_txt_missing: 'Proof of ownership needed',
    dns_error: 'Your DNS provider did not answer',
  };
  const STATUS_WORDS = { pending: 'Pending', verified: 'Verified', failed: 'Failed' };

  const $ = (id) => document.getElementById(id);
  // generation: bumped by every sign-out; an answer to a request made before it is dropped (api()).
  // shown: the data the tables were last built from; loads: numbers each project load, so an older
  // answer never replaces a newer one. restart: the start with the kept token failed (refresh.ts tries
  // it again).
  const state = { token: sessionStorage.getItem(TOKEN_KEY), projectId: null, project: null, notices: new Map(), openRecords: new Set(), openTimelines: new Set(), timelines: new Map(),
    projectNotice: null, busy: 0, poll: 0, generation: 0, shown: '', loads: 0, applied: 0, loading: 0, restart: false };

  // The only way this page builds DOM: properties and text nodes, never HTML strings.
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'class') el.className = value;
      else if (key === 'text') el.textContent = value;
      else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
      else el.setAttribute(key, value === true ? '' : String(value));
    }
    for (const child of children.flat(Infinity)) if (child !== null && child !== undefined && child !== false) el.append(child);
    return el;
  }
  const show = (el, visible) => { el.hidden = !visible; };
  const say = (text) => { $('announce').textContent = ''; setTimeout(() => { $('announce').textContent = text; }, 30); };
  function setText(el, text) { el.textContent = text || ''; show(el, Boolean(text)); }

  class ApiError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  // Callers take a 401 as "already handled": the page is signed out and says why. After a sign-out
  // nothing is sent, and an answer to a request made before it is dropped the same way, so an action
  // still running cannot refresh the page, restart the poll or sign out again with the next token.
  const signedOut = () => new ApiError(401, 'signed_out', 'Signed out.');

  async function api(method, path, body) {
    const generation = state.generation;
    if (!state.token) throw signedOut();
    const headers = { authorization: 'Bearer ' + state.token };
    if (body !== undefined) headers['content-type'] = 'application/json';
    let response;
    try {
      response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store' });
    } catch (err) {
      if (generation !== state.generation) throw signedOut();
      throw new ApiError(0, 'network', 'Portico could not be reached (' + err.message + '). Check that it is running and try again.');
    }
    if (generation !== state.generation) throw signedOut();
    if (response.status === 204) return null;
    const text = await response.text();
    if (generation !== state.generation) throw signedOut();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = null; }
    if (response.status === 401) {
      signOut('The admin token was not accepted. Enter it again.');
      throw new ApiError(401, 'unauthorized', 'The admin token was not accepted.');
    }
    if (!response.ok) {
      const message = data && typeof data.message === 'string' ? data.message : 'Portico answered ' + response.status + '.';
      throw new ApiError(response.status, data && data.code, message);
    }
    return data;
  }
  const enc = encodeURIComponent;
  const projectPath = () => '/admin/projects/' + enc(state.projectId);

  function formatDate(iso, withTime) {
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso);
    return withTime ? date.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' }) : date.toLocaleDateString(undefined, { dateStyle: 'medium' });
  }

${ADMIN_TOKEN}
${PROJECT_PICKER}
${PROJECT_REFRESH}

  // 3. rendering: the tables are rebuilt from the project; forms keep what is typed
  function render() {
    const project = state.project;
    if (!project) return;
    state.shown = shownData();
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.focus : undefined;
    $('crumb-project').textContent = project.name;
    $('meta-default').textContent = project.defaultDomain;
    $('meta-upstream').textContent = project.upstream || 'none yet';
    show($('project-meta'), true);
    show($('project-view'), true);
    const count = project.domains.length;
    $('domains-count').textContent = count === 1 ? '1 domain' : count + ' domains';
    setText($('domains-notice'), state.projectNotice && state.projectNotice.text);
    if (state.projectNotice) $('domains-notice').className = 'notice ' + state.projectNotice.kind;
    // a table that scrolls sideways (a narrow screen) stays where the owner scrolled it
    const scrolled = new Map([...document.querySelectorAll('[data-scroll]')].map((el) => [el.dataset.scroll, el.scrollLeft]));
    const shown = shownDomains(project.domains);
    $('domains').replaceChildren(...shown.flatMap(domainRows));
    for (const el of document.querySelectorAll('[data-scroll]')) if (scrolled.get(el.dataset.scroll)) el.scrollLeft = scrolled.get(el.dataset.scroll);
    show($('domains-table'), shown.length > 0);
    show($('domains-empty'), count === 0);
    $('redirects').replaceChildren(...project.redirects.map(redirectRow));
    show($('redirects-table'), project.redirects.length > 0);
    show($('redirects-empty'), project.redirects.length === 0);
    renderRedirectSources();
    if (focused) {
      const again = document.querySelector('[data-focus="' + CSS.escape(focused) + '"]');
      if (again) again.focus();
      else if (document.activeElement === document.body) $('domains-title').focus();
    }
    schedulePoll();
  }

  function renderRedirectSources() {
    const select = $('redirect-from');
    const previous = select.value;
    const sources = state.project.domains.filter((d) => !d.redirect);
    select.replaceChildren(...sources.map((d) => h('option', { value: d.hostname, text: d.hostname })));
    if (sources.some((d) => d.hostname === previous)) select.value = previous;
    const none = sources.length === 0;
    for (const el of [select, $('redirect-to'), $('redirect-status'), $('redirect-submit')]) el.disabled = none;
    if (none) select.append(h('option', { value: '', text: state.project.domains.length ? 'Every domain redirects already' : 'Add a domain first' }));
  }

${DOMAIN_ROWS}
  function redirectRow(r) {
    return h('tr', {},
      h('td', { class: 'hostname', text: r.from }),
      h('td', { class: 'mono', 'data-label': 'To', text: r.to }),
      h('td', { 'data-label': 'Status', text: String(r.status) }),
      h('td', { class: 'actions' }, h('button', { type: 'button', class: 'btn danger', 'data-focus': 'unredirect:' + r.from, 'aria-label': 'Remove redirect from ' + r.from, text: 'Remove', onclick: (e) => removeRedirect(e.currentTarget, r) })));
  }

  // 4. actions: every API error lands next to what caused it
  async function busy(button, label, work) {
    const original = button.textContent;
    button.disabled = true;
    button.textContent = label;
    state.busy++;
    state.projectNotice = null;
    try { await work(); } finally {
      state.busy--;
      if (button.isConnected) { button.disabled = false; button.textContent = original; }
    }
  }

  // Removals ask first, in the page's one dialog; work() runs only when the owner confirms.
  function confirmRemoval(button, words, work) {
    const dialog = $('remove-dialog');
    $('remove-title').textContent = words.title;
    $('remove-warning').textContent = words.warning;
    $('remove-more').textContent = words.more;
    $('remove-confirm').textContent = words.confirm;
    dialog.returnValue = '';
    dialog.addEventListener('close', () => {
      if (dialog.returnValue === 'remove') work();
      else if (button.isConnected) button.focus();
    }, { once: true });
    dialog.showModal();
  }

  $('add-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const input = $('add-hostname');
    const hostname = input.value.trim();
    if (!hostname) { setText($('add-error'), 'Enter a hostname such as shop.example.com.'); input.setAttribute('aria-invalid', 'true'); input.focus(); return; }
    busy($('add-submit'), 'Adding…', async () => {
      try {
        const domain = await api('POST', projectPath() + '/domains', { hostname });
        setText($('add-error'), '');
        input.setAttribute('aria-invalid', 'false');
        input.value = '';
        state.notices.set(domain.hostname, { kind: 'success', text: domain.hostname + ' was added. Create the DNS record below at your DNS provider: Portico checks it by itself and orders the certificate (or click Verify to check now).' });
        showLastDomainPage();
        say(domain.hostname + ' added');
      } catch (err) {
        if (err.status === 401) return;
        setText($('add-error'), err.message);
        input.setAttribute('aria-invalid', 'true');
        input.focus();
        return;
      }
      await refresh();
    });
  });

${DOMAIN_ACTIONS}
${DOMAIN_LIST}
${REDIRECT_ACTIONS}
  async function copy(button, value) {
    let copied = false;
    try {
      if (navigator.clipboard && window.isSecureContext) { await navigator.clipboard.writeText(value); copied = true; }
    } catch { copied = false; }
    if (!copied) {
      // the old way still works where the async clipboard is missing or refused
      const area = h('textarea', { class: 'offscreen', readonly: true, 'aria-hidden': 'true' });
      area.value = value;
      document.body.append(area);
      area.select();
      try { copied = document.execCommand('copy'); } catch { copied = false; }
      area.remove();
    }
    button.textContent = copied ? 'Copied' : 'Copy failed: select the value';
    say(copied ? 'Copied ' + value : 'Copy failed; select the value and copy it by hand');
    setTimeout(() => { if (button.isConnected) button.textContent = 'Copy'; }, 2000);
  }

  if (state.token) restartApp();
  else signOut('');
})();
`;
