// The Domains dashboard (issue 6): one self-contained HTML page for GET / on the admin listener.
// It holds no data, so it is served without the token: the page asks for the admin token once, keeps
// it in sessionStorage (this tab only) and drives the admin API of DESIGN §5 with same-origin fetches.
// No build step and no external resources. The style and the script are inline and named by hash in
// dashboardCsp(), so the page also runs under a Content-Security-Policy without 'unsafe-inline'.
// API data only ever reaches the page through textContent and attribute values, never innerHTML.
import { createHash } from 'node:crypto';

const STYLE = String.raw`
:root { --fg:#1b1f24; --muted:#5b6472; --line:#e2e6eb; --bg:#f5f7fa; --card:#fff; --accent:#2456d3; --accent-dark:#1a43ad;
  --danger:#b42318; --ok-bg:#e7f6ec; --ok:#14733a; --warn-bg:#fff5d6; --warn:#8a5a00; --bad-bg:#fdecea; --info-bg:#eaf1ff;
  --mono: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; color-scheme: light; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color:var(--fg); background:var(--bg); }
[hidden] { display:none !important; }
header.top { background:#111827; color:#fff; }
header.top .inner { max-width:1120px; margin:0 auto; padding:12px 24px; display:flex; align-items:center; gap:12px; }
.brand { font-weight:700; font-size:16px; letter-spacing:.2px; }
.brand small { font-weight:500; color:#9ca3af; margin-left:6px; font-size:13px; }
header.top .spacer { flex:1; }
header.top .btn { background:transparent; color:#e5e7eb; border-color:#374151; }
header.top .btn:hover { background:#1f2937; }
main { max-width:1120px; margin:0 auto; padding:24px; }
h1 { font-size:22px; margin:4px 0 2px; }
h2 { font-size:16px; margin:0 0 4px; }
h3 { font-size:13px; margin:0 0 8px; text-transform:uppercase; letter-spacing:.4px; color:var(--muted); }
p { margin:0 0 8px; }
.muted, .help { color:var(--muted); }
.help { font-size:13px; margin:6px 0 0; }
.mono { font-family:var(--mono); font-size:13px; }
.card { background:var(--card); border:1px solid var(--line); border-radius:10px; overflow:hidden; box-shadow:0 1px 2px rgba(16,24,40,.04); margin-bottom:20px; }
.card > .head { padding:16px 20px 12px; border-bottom:1px solid var(--line); }
.card > .body { padding:16px 20px; }
.login { max-width:440px; margin:64px auto; }
.login input { width:100%; }
label { display:block; font-weight:600; font-size:13px; margin-bottom:4px; }
input, select { font:inherit; color:inherit; border:1px solid #cfd5dd; border-radius:6px; padding:7px 10px; background:#fff; min-height:36px; }
input:focus-visible, select:focus-visible, button:focus-visible, summary:focus-visible { outline:3px solid #9bb8ff; outline-offset:1px; }
input[aria-invalid="true"] { border-color:var(--danger); }
.field { display:flex; flex-direction:column; }
.inline { display:flex; gap:12px; align-items:flex-end; flex-wrap:wrap; }
.grow { flex:1; min-width:220px; }
.grow input { width:100%; }
.btn { font:inherit; font-weight:600; font-size:13px; border:1px solid #cfd5dd; background:#fff; color:var(--fg); border-radius:6px; padding:6px 12px; min-height:32px; cursor:pointer; white-space:nowrap; }
.btn:hover { background:#f2f4f7; }
.btn:disabled { opacity:.6; cursor:progress; }
.btn.primary { background:var(--accent); border-color:var(--accent); color:#fff; }
.btn.primary:hover { background:var(--accent-dark); }
.btn.danger { color:var(--danger); border-color:#f1c0bb; }
.btn.danger:hover { background:var(--bad-bg); }
.btn.danger.solid { background:var(--danger); border-color:var(--danger); color:#fff; }
.btn.small { padding:2px 8px; min-height:26px; font-size:12px; }
.btn.link { border:none; background:none; color:var(--accent); padding:0; min-height:0; font-weight:500; }
.btn.link:hover { text-decoration:underline; }
.field .btn, .inline > .btn { min-height:36px; }
.toolbar { display:flex; align-items:flex-end; gap:16px; flex-wrap:wrap; margin-bottom:20px; }
.toolbar select { min-width:260px; }
.meta { display:flex; gap:20px; flex-wrap:wrap; font-size:13px; color:var(--muted); padding-bottom:8px; }
.meta b { color:var(--fg); font-weight:500; }
nav.crumbs ol { list-style:none; padding:0; margin:0; display:flex; gap:6px; font-size:13px; color:var(--muted); }
nav.crumbs li + li::before { content:"\2192"; margin-right:6px; }
nav.crumbs [aria-current] { color:var(--fg); font-weight:600; }
.pagehead { margin-bottom:16px; }
.table-wrap { overflow-x:auto; }
table { width:100%; border-collapse:collapse; }
th { text-align:left; font-size:12px; font-weight:600; text-transform:uppercase; letter-spacing:.4px; color:var(--muted); padding:10px 12px; border-bottom:1px solid var(--line); background:#fafbfc; }
td { padding:12px; border-bottom:1px solid var(--line); vertical-align:top; }
tr.detail > td { background:#fbfcfd; padding:4px 12px 16px 28px; }
tr:last-child > td { border-bottom:none; }
th.actions, td.actions { text-align:right; white-space:nowrap; }
td.actions .btn { margin-left:6px; }
td.cert { max-width:320px; }
.name-line { display:flex; flex-wrap:wrap; align-items:center; gap:6px 8px; }
.hostname { font-family:var(--mono); font-size:14px; font-weight:600; word-break:break-all; }
.sub { font-size:12px; color:var(--muted); margin-top:2px; }
.badge { display:inline-block; font-size:12px; font-weight:600; line-height:18px; padding:1px 8px; border-radius:999px; border:1px solid transparent; white-space:nowrap; vertical-align:middle; }
.badge.pending { background:var(--warn-bg); color:var(--warn); border-color:#f4df9c; }
.badge.verified, .badge.issued { background:var(--ok-bg); color:var(--ok); border-color:#b7e2c4; }
.badge.failed { background:var(--bad-bg); color:var(--danger); border-color:#f5c2bc; }
.badge.none { background:#f2f4f7; color:var(--muted); border-color:#e2e6eb; }
.badge.primary { background:var(--info-bg); color:var(--accent-dark); border-color:#c7d7fb; }
.badge.redirect { background:#f3eefe; color:#5b34b4; border-color:#ddd0fa; }
.notice { border-radius:8px; padding:10px 12px; margin:12px 0 0; font-size:13px; border:1px solid; }
.notice.success { background:var(--ok-bg); border-color:#b7e2c4; color:#0f5a2d; }
.notice.error { background:var(--bad-bg); border-color:#f5c2bc; color:#8c1d13; }
.notice.info { background:var(--info-bg); border-color:#c7d7fb; color:#1a3a8a; }
.error-text { color:var(--danger); font-size:13px; margin:8px 0 0; }
.diag { border-left:4px solid #e0a800; background:var(--warn-bg); border-radius:0 8px 8px 0; padding:10px 12px; margin:12px 0 0; }
.diag.bad { border-left-color:var(--danger); background:var(--bad-bg); }
.diag strong { display:block; margin-bottom:2px; }
.diag p { margin:0; }
.diag .facts { margin-top:4px; font-size:12px; color:var(--muted); }
.diag code { font-family:var(--mono); font-size:11px; color:var(--muted); margin-left:6px; font-weight:400; }
.records { margin-top:14px; }
.records table { background:#fff; border:1px solid var(--line); border-radius:8px; border-collapse:separate; border-spacing:0; overflow:hidden; }
.records th { background:#f5f7fa; padding:8px 12px; }
.records td { padding:8px 12px; vertical-align:middle; }
.records td.value .btn { margin-left:12px; }
.records .note { font-size:12px; color:var(--muted); }
.empty { padding:20px; text-align:center; color:var(--muted); }
dialog { border:none; border-radius:12px; padding:0; max-width:480px; width:calc(100% - 32px); box-shadow:0 20px 50px rgba(16,24,40,.3); }
dialog::backdrop { background:rgba(17,24,39,.5); }
dialog form { padding:22px 24px 18px; }
dialog h2 { font-size:18px; margin-bottom:10px; word-break:break-all; }
dialog .warning { background:var(--bad-bg); border:1px solid #f5c2bc; color:#8c1d13; border-radius:8px; padding:10px 12px; }
#redirect-form { border-top:1px solid var(--line); }
.dialog-actions { display:flex; justify-content:flex-end; gap:8px; margin-top:18px; }
@media (max-width: 720px) {
  main { padding:16px; }
  header.top .inner { padding:12px 16px; }
  .toolbar select { min-width:0; width:100%; }
  .toolbar .field { width:100%; }
  .stack thead { display:none; }
  .stack, .stack > tbody, .stack > tbody > tr, .stack > tbody > tr > td { display:block; width:100%; }
  .stack > tbody > tr > td { border-bottom:none; padding:6px 16px; }
  .stack > tbody > tr > td:first-child { padding-top:14px; }
  .stack > tbody > tr > td:last-child { padding-bottom:14px; border-bottom:1px solid var(--line); }
  .stack td[data-label]::before { content:attr(data-label); display:block; font-size:11px; font-weight:600; text-transform:uppercase; letter-spacing:.4px; color:var(--muted); }
  td.actions { text-align:left; white-space:normal; }
  td.actions .btn { margin:0 6px 6px 0; }
  td.cert { max-width:none; }
  tr.detail > td { padding:4px 16px 16px; }
}
.sr-only, .offscreen { position:absolute; width:1px; height:1px; padding:0; margin:-1px; overflow:hidden; clip:rect(0,0,0,0); white-space:nowrap; border:0; }
`;

const BODY = String.raw`
<header class="top"><div class="inner">
  <span class="brand">Portico<small>Admin</small></span><span class="spacer"></span>
  <button type="button" class="btn small" id="sign-out" hidden>Forget token</button>
</div></header>
<main id="main">
  <section id="login" class="card login" aria-labelledby="login-title" hidden>
    <div class="head"><h1 id="login-title">Sign in</h1><p class="muted">This dashboard manages the custom domains of your projects.</p></div>
    <form id="login-form" class="body" novalidate>
      <label for="token">Admin token</label>
      <input id="token" name="token" type="password" autocomplete="current-password" spellcheck="false" required aria-describedby="token-help token-error">
      <p id="token-help" class="help">The PORTICO_ADMIN_TOKEN of this Portico. It is kept in this browser tab only, until you close it.</p>
      <p id="token-error" class="error-text" role="alert" hidden></p>
      <div class="dialog-actions"><button class="btn primary" type="submit">Continue</button></div>
    </form>
  </section>

  <div id="app" hidden>
    <div class="toolbar">
      <div class="field"><label for="project">Project</label><select id="project"></select></div>
      <div id="project-meta" class="meta" hidden>
        <span>Default domain <b class="mono" id="meta-default"></b></span>
        <span>Upstream <b class="mono" id="meta-upstream"></b></span>
      </div>
    </div>
    <p id="app-error" class="notice error" role="alert" hidden></p>
    <p id="no-projects" class="card empty" hidden>There are no projects yet. Create one with <span class="mono">POST /admin/projects</span>, then reload this page.</p>

    <div id="project-view" hidden>
      <div class="pagehead">
        <nav class="crumbs" aria-label="Breadcrumb"><ol><li id="crumb-project"></li><li>Project settings</li><li aria-current="page">Domains</li></ol></nav>
        <h1>Domains</h1>
        <p class="muted">Serve this project on your own hostnames. Add a domain, create the DNS record shown, then verify it; the certificate follows by itself.</p>
      </div>

      <section class="card" aria-labelledby="add-title">
        <div class="head"><h2 id="add-title">Add domain</h2></div>
        <form id="add-form" class="body" novalidate>
          <div class="inline">
            <div class="field grow"><label for="add-hostname">Hostname</label>
              <input id="add-hostname" name="hostname" placeholder="shop.example.com" autocomplete="off" autocapitalize="off" spellcheck="false" required aria-describedby="add-help add-error"></div>
            <button class="btn primary" type="submit" id="add-submit">Add domain</button>
          </div>
          <p id="add-help" class="help">A subdomain such as shop.example.com, or an apex domain such as example.com.</p>
          <p id="add-error" class="error-text" role="alert" hidden></p>
        </form>
      </section>

      <section class="card" aria-labelledby="domains-title">
        <div class="head"><h2 id="domains-title">Domains</h2><p class="muted" id="domains-count"></p></div>
        <div class="table-wrap">
          <table id="domains-table" class="stack" aria-labelledby="domains-title">
            <thead><tr><th scope="col">Domain</th><th scope="col">Status</th><th scope="col">Certificate</th><th scope="col" class="actions"><span class="sr-only">Actions</span></th></tr></thead>
            <tbody id="domains"></tbody>
          </table>
        </div>
        <p id="domains-empty" class="empty" hidden>No custom domains yet. Add one above.</p>
      </section>

      <section class="card" aria-labelledby="redirects-title">
        <div class="head"><h2 id="redirects-title">Redirects</h2><p class="muted">A redirect domain answers every request with a redirect to another hostname instead of serving the project.</p></div>
        <div class="table-wrap">
          <table id="redirects-table" class="stack" aria-labelledby="redirects-title">
            <thead><tr><th scope="col">From</th><th scope="col">To</th><th scope="col">Status</th><th scope="col" class="actions"><span class="sr-only">Actions</span></th></tr></thead>
            <tbody id="redirects"></tbody>
          </table>
        </div>
        <p id="redirects-empty" class="empty" hidden>No redirects.</p>
        <form id="redirect-form" class="body" novalidate aria-labelledby="redirect-form-title">
          <h3 id="redirect-form-title">Add redirect</h3>
          <div class="inline">
            <div class="field"><label for="redirect-from">From</label><select id="redirect-from" required></select></div>
            <div class="field grow"><label for="redirect-to">To</label><input id="redirect-to" placeholder="www.example.com" autocomplete="off" autocapitalize="off" spellcheck="false" required aria-describedby="redirect-error"></div>
            <div class="field"><label for="redirect-status">Status</label><select id="redirect-status">
              <option value="301">301 Moved Permanently</option><option value="302">302 Found</option>
              <option value="307">307 Temporary Redirect</option><option value="308">308 Permanent Redirect</option></select></div>
            <button class="btn" type="submit" id="redirect-submit">Add redirect</button>
          </div>
          <p id="redirect-error" class="error-text" role="alert" hidden></p>
        </form>
      </section>
    </div>
  </div>
  <p id="announce" class="sr-only" aria-live="polite"></p>
</main>

<dialog id="remove-dialog" aria-labelledby="remove-title" aria-describedby="remove-text">
  <form method="dialog">
    <h2 id="remove-title"></h2>
    <div id="remove-text"><p class="warning" id="remove-warning"></p><p id="remove-more" class="muted"></p></div>
    <div class="dialog-actions"><button class="btn" value="cancel" autofocus>Cancel</button><button class="btn danger solid" value="remove" id="remove-confirm">Remove domain</button></div>
  </form>
</dialog>
`;

// Plain ES2020 for the browser. Kept free of backquotes so it can live in this String.raw literal.
const SCRIPT = String.raw`
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
  const state = { token: sessionStorage.getItem(TOKEN_KEY), projectId: null, project: null, notices: new Map(), openRecords: new Set(), busy: 0, poll: 0 };

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

  async function api(method, path, body) {
    const headers = { authorization: 'Bearer ' + state.token };
    if (body !== undefined) headers['content-type'] = 'application/json';
    let response;
    try {
      response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store' });
    } catch (err) {
      throw new ApiError(0, 'network', 'Portico could not be reached (' + err.message + '). Check that it is running and try again.');
    }
    if (response.status === 204) return null;
    const text = await response.text();
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

  // 1. token
  function signOut(reason) {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    state.project = null;
    clearTimeout(state.poll);
    show($('app'), false);
    show($('sign-out'), false);
    show($('login'), true);
    setText($('token-error'), reason || '');
    $('token').setAttribute('aria-invalid', reason ? 'true' : 'false');
    $('token').value = '';
    $('token').focus();
  }

  $('login-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const token = $('token').value.trim();
    if (!token) { setText($('token-error'), 'Enter the admin token.'); $('token').setAttribute('aria-invalid', 'true'); return; }
    state.token = token;
    setText($('token-error'), '');
    try {
      await startApp();
    } catch (err) {
      if (err.status !== 401) setText($('token-error'), err.message);
    }
  });
  $('sign-out').addEventListener('click', () => signOut(''));

  // 2. project picker
  async function startApp() {
    const projects = await api('GET', '/admin/projects');
    sessionStorage.setItem(TOKEN_KEY, state.token);
    show($('login'), false);
    show($('app'), true);
    show($('sign-out'), true);
    const select = $('project');
    select.replaceChildren(h('option', { value: '', text: 'Choose a project…' }), ...projects.map((p) => h('option', { value: p.id, text: p.name + ' (' + p.defaultDomain + ')' })));
    show($('no-projects'), projects.length === 0);
    select.disabled = projects.length === 0;
    const saved = sessionStorage.getItem(PROJECT_KEY);
    const initial = projects.some((p) => p.id === saved) ? saved : projects.length === 1 ? projects[0].id : '';
    select.value = initial;
    if (initial) await selectProject(initial).catch(showAppError);
    else { show($('project-view'), false); select.focus(); }
  }

  $('project').addEventListener('change', (event) => { selectProject(event.target.value).catch(showAppError); });

  async function selectProject(id) {
    state.projectId = id || null;
    state.notices.clear();
    state.openRecords.clear();
    setText($('add-error'), '');
    setText($('redirect-error'), '');
    if (!id) { sessionStorage.removeItem(PROJECT_KEY); show($('project-view'), false); show($('project-meta'), false); return; }
    sessionStorage.setItem(PROJECT_KEY, id);
    await loadProject();
  }

  function showAppError(err) { if (err && err.status !== 401) setText($('app-error'), err.message); }

  async function loadProject() {
    const id = state.projectId;
    const project = await api('GET', '/admin/projects/' + enc(id));
    if (id !== state.projectId) return;
    state.project = project;
    setText($('app-error'), '');
    render();
  }

  // 3. rendering: the tables are rebuilt from the project; forms keep what is typed
  function render() {
    const project = state.project;
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.focus : undefined;
    $('crumb-project').textContent = project.name;
    $('meta-default').textContent = project.defaultDomain;
    $('meta-upstream').textContent = project.upstream || 'none yet';
    show($('project-meta'), true);
    show($('project-view'), true);
    const count = project.domains.length;
    $('domains-count').textContent = count === 1 ? '1 domain' : count + ' domains';
    $('domains').replaceChildren(...project.domains.flatMap(domainRows));
    show($('domains-table'), count > 0);
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

  function certificateCell(domain) {
    const cert = domain.certificate || { status: 'none' };
    const cell = h('td', { class: 'cert', 'data-label': 'Certificate' });
    if (cert.status === 'issued') {
      cell.append(h('span', { class: 'badge issued', text: 'Issued' }));
      if (cert.notAfter) cell.append(h('div', { class: 'sub', text: 'Valid until ' + formatDate(cert.notAfter) }));
      if (cert.issuer) cell.append(h('div', { class: 'sub', text: 'by ' + cert.issuer }));
    } else if (cert.status === 'pending') {
      cell.append(h('span', { class: 'badge pending', text: 'Issuing…' }), h('div', { class: 'sub', text: 'Requested from the certificate authority' }));
    } else if (cert.status === 'failed') {
      cell.append(h('span', { class: 'badge failed', text: 'Failed' }));
      if (cert.lastError) cell.append(h('div', { class: 'sub', text: cert.lastError }));
      if (cert.nextAttemptAt) cell.append(h('div', { class: 'sub', text: 'Next attempt ' + formatDate(cert.nextAttemptAt, true) }));
    } else {
      cell.append(h('span', { class: 'badge none', text: 'None' }), h('div', { class: 'sub', text: domain.status === 'verified' ? 'Not requested yet' : 'Requested once the domain is verified' }));
    }
    return cell;
  }

  function domainRows(domain) {
    const host = domain.hostname;
    const verified = domain.status === 'verified';
    const recordsOpen = !verified || state.openRecords.has(host);
    const name = h('td', {},
      h('div', { class: 'name-line' },
        h('span', { class: 'hostname', text: host }),
        domain.primary ? h('span', { class: 'badge primary', text: 'Primary', title: 'Visitors of the project are served on this hostname' }) : null,
        domain.redirect ? h('span', { class: 'badge redirect', text: 'Redirects → ' + domain.redirect.to + ' (' + domain.redirect.status + ')' }) : null),
      h('div', { class: 'sub', text: verified && domain.verifiedAt ? 'Verified ' + formatDate(domain.verifiedAt) : 'Added ' + formatDate(domain.createdAt) }),
      verified ? h('button', { type: 'button', class: 'btn link small', 'aria-expanded': String(recordsOpen), 'data-focus': 'records:' + host, 'aria-label': (recordsOpen ? 'Hide' : 'Show') + ' DNS records of ' + host,
        text: recordsOpen ? 'Hide DNS records' : 'Show DNS records',
        onclick: () => { if (recordsOpen) state.openRecords.delete(host); else state.openRecords.add(host); render(); } }) : null);
    const status = h('td', {}, h('span', { class: 'badge ' + domain.status, text: STATUS_WORDS[domain.status] || domain.status }));
    const actions = h('td', { class: 'actions' },
      verified
        ? h('button', { type: 'button', class: 'btn', 'data-focus': 'reverify:' + host, 'aria-label': 'Re-verify ' + host, title: 'Check DNS and CAA again and start a new certificate attempt', text: 'Re-verify', onclick: (e) => verify(e.currentTarget, host, true) })
        : h('button', { type: 'button', class: 'btn primary', 'data-focus': 'verify:' + host, 'aria-label': 'Verify ' + host, text: 'Verify', onclick: (e) => verify(e.currentTarget, host, false) }),
      verified && !domain.primary && !domain.redirect
        ? h('button', { type: 'button', class: 'btn', 'data-focus': 'primary:' + host, 'aria-label': 'Make ' + host + ' primary', text: 'Make primary', onclick: (e) => makePrimary(e.currentTarget, host) })
        : null,
      h('button', { type: 'button', class: 'btn danger', 'data-focus': 'remove:' + host, 'aria-label': 'Remove ' + host, text: 'Remove', onclick: (e) => confirmRemove(e.currentTarget, domain) }));
    const row = h('tr', { 'data-hostname': host }, name, status, certificateCell(domain), actions);

    const notice = state.notices.get(host);
    const details = [
      notice ? h('p', { class: 'notice ' + notice.kind, role: notice.kind === 'error' ? 'alert' : 'status', text: notice.text }) : null,
      ...(domain.diagnostics || []).map((d) => diagnostic(d, domain.status === 'failed')),
      recordsOpen ? recordsBlock(domain) : null,
    ].filter(Boolean);
    if (details.length === 0) return [row];
    return [row, h('tr', { class: 'detail', 'data-detail-of': host }, h('td', { colspan: '4' }, details))];
  }

  function diagnostic(d, bad) {
    const facts = [];
    if (Array.isArray(d.found) && d.found.length) facts.push('Found: ' + d.found.join(', '));
    if (d.expected) facts.push('Expected: ' + d.expected);
    return h('div', { class: 'diag' + (bad ? ' bad' : ''), role: 'group', 'aria-label': DIAGNOSTIC_TITLES[d.code] || d.code },
      h('strong', {}, DIAGNOSTIC_TITLES[d.code] || 'DNS check', h('code', { text: d.code })),
      h('p', { text: d.message }),
      facts.length ? h('p', { class: 'facts', text: facts.join(' · ') }) : null);
  }

  function recordsBlock(domain) {
    const records = domain.records || [];
    // record names are relative to the registrable domain: "shop" for shop.example.com, "@" for the apex
    const main = records.find((r) => r.type === 'CNAME' || r.type === 'ALIAS');
    const zone = main && main.name !== '@' && domain.hostname.startsWith(main.name + '.') ? domain.hostname.slice(main.name.length + 1) : domain.hostname;
    const id = 'records-' + domain.hostname;
    return h('div', { class: 'records table-wrap' },
      h('h3', { id, text: domain.status === 'verified' ? 'DNS records' : 'DNS records to create at your DNS provider' }),
      h('table', { 'aria-labelledby': id },
        h('thead', {}, h('tr', {}, ['Type', 'Name', 'Value', 'TTL'].map((c) => h('th', { scope: 'col', text: c })))),
        h('tbody', {}, records.map((r) => [
          h('tr', {},
            h('td', { class: 'mono', text: r.type }),
            h('td', { class: 'mono', text: r.name }),
            h('td', { class: 'value' }, h('span', { class: 'mono', text: r.value }),
              h('button', { type: 'button', class: 'btn small', 'aria-label': 'Copy value ' + r.value, 'data-focus': 'copy:' + domain.hostname + ':' + r.type + ':' + r.name, text: 'Copy', onclick: (e) => copy(e.currentTarget, r.value) })),
            h('td', { class: 'mono', text: String(r.ttl) })),
          r.note ? h('tr', {}, h('td', { colspan: '4', class: 'note', text: r.note })) : null,
        ]))),
      h('p', { class: 'help', text: 'Names are relative to ' + zone + ' (@ stands for ' + zone + ' itself); some DNS providers want the full name, ' + domain.hostname + ', instead.' }));
  }

  function redirectRow(r) {
    return h('tr', {},
      h('td', { class: 'hostname', text: r.from }),
      h('td', { class: 'mono', 'data-label': 'To', text: r.to }),
      h('td', { 'data-label': 'Status', text: String(r.status) }),
      h('td', { class: 'actions' }, h('button', { type: 'button', class: 'btn danger', 'aria-label': 'Remove redirect from ' + r.from, text: 'Remove', onclick: (e) => removeRedirect(e.currentTarget, r.from) })));
  }

  // 4. actions: every API error lands next to what caused it
  async function busy(button, label, work) {
    const original = button.textContent;
    button.disabled = true;
    button.textContent = label;
    state.busy++;
    try { await work(); } finally {
      state.busy--;
      if (button.isConnected) { button.disabled = false; button.textContent = original; }
    }
  }

  async function refresh() {
    try { await loadProject(); } catch (err) { showAppError(err); }
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
        state.notices.set(domain.hostname, { kind: 'success', text: domain.hostname + ' was added. Create the DNS record below at your DNS provider, then click Verify.' });
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

  function verify(button, hostname, again) {
    return busy(button, again ? 'Re-verifying…' : 'Verifying…', async () => {
      try {
        const domain = await api('POST', projectPath() + '/domains/' + enc(hostname) + (again ? '/reverify' : '/verify'));
        const problems = (domain.diagnostics || []).length;
        const text = domain.status === 'verified'
          ? (problems ? hostname + ' stays verified, but the check found the problems below.' : hostname + ' is verified: its DNS points to Portico. Its certificate is ordered now; the Certificate column follows it.')
          : domain.status === 'failed' ? hostname + ' could not be verified. Fix what is described below, then verify again.'
          : hostname + ' is not verified yet. See below, then verify again.';
        state.notices.set(hostname, { kind: domain.status === 'verified' && !problems ? 'success' : domain.status === 'failed' ? 'error' : 'info', text });
        say(text);
      } catch (err) {
        if (err.status === 401) return;
        state.notices.set(hostname, { kind: 'error', text: err.message });
      }
      await refresh();
    });
  }

  function makePrimary(button, hostname) {
    return busy(button, 'Saving…', async () => {
      try {
        await api('PATCH', projectPath() + '/domains/' + enc(hostname), { primary: true });
        state.notices.set(hostname, { kind: 'success', text: hostname + ' is now the primary domain.' });
      } catch (err) {
        if (err.status === 401) return;
        state.notices.set(hostname, { kind: 'error', text: err.message });
      }
      await refresh();
    });
  }

  function confirmRemove(button, domain) {
    const host = domain.hostname;
    const dialog = $('remove-dialog');
    $('remove-title').textContent = 'Remove ' + host + '?';
    $('remove-warning').textContent = 'Traffic on ' + host + ' stops at once, everywhere: visitors get an error page instead of this project, and its certificate is deleted.';
    $('remove-more').textContent = (domain.primary ? 'It is the primary domain: another verified domain becomes primary, if there is one. ' : '') +
      'To serve it again you would have to add it and verify it again.';
    dialog.returnValue = '';
    dialog.addEventListener('close', () => {
      if (dialog.returnValue !== 'remove') { if (button.isConnected) button.focus(); return; }
      busy(button, 'Removing…', async () => {
        try {
          await api('DELETE', projectPath() + '/domains/' + enc(host));
          state.notices.delete(host);
          say(host + ' removed');
        } catch (err) {
          if (err.status === 401) return;
          state.notices.set(host, { kind: 'error', text: err.message });
        }
        await refresh();
        if (document.activeElement === document.body) $('add-hostname').focus();
      });
    }, { once: true });
    dialog.showModal();
  }

  $('redirect-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const from = $('redirect-from').value;
    const to = $('redirect-to').value.trim();
    if (!to) { setText($('redirect-error'), 'Enter the hostname to send visitors to.'); $('redirect-to').setAttribute('aria-invalid', 'true'); return; }
    busy($('redirect-submit'), 'Adding…', async () => {
      try {
        await api('POST', projectPath() + '/redirects', { from, to, status: Number($('redirect-status').value) });
        setText($('redirect-error'), '');
        $('redirect-to').value = '';
        $('redirect-to').setAttribute('aria-invalid', 'false');
        say('Redirect from ' + from + ' added');
      } catch (err) {
        if (err.status === 401) return;
        setText($('redirect-error'), err.message);
        $('redirect-to').setAttribute('aria-invalid', 'true');
        return;
      }
      await refresh();
    });
  });

  function removeRedirect(button, from) {
    return busy(button, 'Removing…', async () => {
      try {
        await api('DELETE', projectPath() + '/redirects/' + enc(from));
        setText($('redirect-error'), '');
        say('Redirect from ' + from + ' removed');
      } catch (err) {
        if (err.status === 401) return;
        setText($('redirect-error'), err.message);
      }
      await refresh();
    });
  }

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

  // certificates are ordered in the background once a domain verifies: follow them until they settle
  function schedulePoll() {
    clearTimeout(state.poll);
    const waiting = state.project && state.project.domains.some((d) => d.certificate && (d.certificate.status === 'pending' || (d.status === 'verified' && d.certificate.status === 'none')));
    if (!waiting) return;
    state.poll = setTimeout(() => {
      if (state.busy > 0 || document.hidden || $('remove-dialog').open) schedulePoll();
      else refresh();
    }, 5000);
  }

  if (state.token) startApp().catch((err) => { if (err.status !== 401) { show($('login'), false); show($('app'), true); show($('sign-out'), true); showAppError(err); } });
  else signOut('');
})();
`;

const sha256 = (text: string) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Domains · Portico</title>
<link rel="icon" href="data:,">
<style>${STYLE}</style>
</head>
<body>${BODY}<script>${SCRIPT}</script>
</body>
</html>
`;

// the page's own inline style and script, by hash; fetches go to this origin only
const CSP = [
  "default-src 'none'",
  `script-src ${sha256(SCRIPT)}`,
  `style-src ${sha256(STYLE)}`,
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** The whole dashboard document. */
export function dashboardPage(): string {
  return PAGE;
}

/** A Content-Security-Policy the page runs under (no 'unsafe-inline'); send it with dashboardPage(). */
export function dashboardCsp(): string {
  return CSP;
}
