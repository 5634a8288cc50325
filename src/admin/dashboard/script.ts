// Plain ES2020 for the browser. Kept free of backquotes so it can live in this String.raw literal.
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
