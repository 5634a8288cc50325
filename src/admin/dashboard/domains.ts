// The dashboard script's domains: the rows for one domain (name, status, certificate and action
// buttons, then a detail row with the latest notice, DNS diagnostics, the records to create and, when
// opened, the domain's timeline) and what its buttons do (verify, re-verify, make primary, remove). Parts of script.ts's String.raw
// literal, set in where they stand inside that script's closure (h, state, api, busy, refresh, say,
// formatDate, copy, confirmRemoval and render are defined there); plain ES2020, no backquotes.
export const DOMAIN_ROWS = String.raw`  function certificateCell(domain) {
    const cert = domain.certificate || { status: 'none' };
    const cell = h('td', { class: 'cert', 'data-label': 'Certificate' });
    if (cert.status === 'issued') {
      cell.append(h('span', { class: 'badge issued', text: 'Issued' }));
      if (cert.notAfter) cell.append(h('div', { class: 'sub', text: 'Valid until ' + formatDate(cert.notAfter) }));
      if (cert.issuer) cell.append(h('div', { class: 'sub', text: 'by ' + cert.issuer }));
    } else if (cert.status === 'queued') {
      // waiting behind a CA limit (DESIGN §6): the place in line and when the order goes out
      cell.append(h('span', { class: 'badge queued', text: 'Queued' }));
      if (cert.queuePosition) cell.append(h('div', { class: 'sub', text: 'Place ' + cert.queuePosition + ' in line for the certificate authority' }));
      if (cert.nextAttemptAt) cell.append(h('div', { class: 'sub', text: 'Ordered by ' + formatDate(cert.nextAttemptAt, true) }));
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
    const timelineOpen = state.openTimelines.has(host);
    const name = h('td', {},
      h('div', { class: 'name-line' },
        h('span', { class: 'hostname', text: host }),
        domain.primary ? h('span', { class: 'badge primary', text: 'Primary', title: 'Visitors of the project are served on this hostname' }) : null,
        domain.redirect ? h('span', { class: 'badge redirect', text: 'Redirects → ' + domain.redirect.to + ' (' + domain.redirect.status + ')' }) : null),
      h('div', { class: 'sub', text: verified && domain.verifiedAt ? 'Verified ' + formatDate(domain.verifiedAt) : 'Added ' + formatDate(domain.createdAt) }),
      !verified && domain.nextCheckAt ? h('div', { class: 'sub', text: 'DNS is checked automatically; next check ' + formatDate(domain.nextCheckAt, true) }) : null,
      h('button', { type: 'button', class: 'btn link small spaced', 'aria-expanded': String(timelineOpen), 'data-focus': 'timeline:' + host, 'aria-label': (timelineOpen ? 'Hide' : 'Show') + ' timeline of ' + host,
        text: timelineOpen ? 'Hide timeline' : 'Show timeline', onclick: () => toggleTimeline(host) }),
      verified ? h('button', { type: 'button', class: 'btn link small', 'aria-expanded': String(recordsOpen), 'data-focus': 'records:' + host, 'aria-label': (recordsOpen ? 'Hide' : 'Show') + ' DNS records of ' + host,
        text: recordsOpen ? 'Hide DNS records' : 'Show DNS records',
        onclick: () => { if (recordsOpen) state.openRecords.delete(host); else state.openRecords.add(host); render(); } }) : null);
    const status = h('td', {}, h('span', { class: 'badge ' + domain.status, text: STATUS_WORDS[domain.status] || domain.status }),
      domain.health === 'misconfigured' ? h('div', {}, h('span', { class: 'badge misconfigured', text: 'Misconfigured', title: domain.certificate.notAfter ? 'DNS checks fail; still served with its certificate (until ' + formatDate(domain.certificate.notAfter) + '), renewals paused' : 'DNS checks fail; no certificate is ordered until they pass' })) : null);
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
      timelineOpen ? timelineBlock(host) : null,
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

  // what each event type is called (the API's types, DESIGN §6)
  const EVENT_WORDS = {
    added: 'Added', dns_checked: 'DNS checked', verified: 'Verified', verification_failed: 'Verification failed',
    certificate_queued: 'Waiting for the CA', order_placed: 'Certificate ordered', challenge_served: 'Challenge answered',
    certificate_issued: 'Certificate issued', order_failed: 'Order failed', renewal_scheduled: 'Renewal planned',
    misconfigured: 'Misconfigured', recovered: 'Recovered', removed: 'Removed',
  };
  const BAD_EVENTS = new Set(['verification_failed', 'order_failed', 'misconfigured']);

  function timelineBlock(host) {
    const events = state.timelines.get(host);
    const id = 'timeline-' + host;
    const body = events === undefined ? h('p', { class: 'help', text: 'Loading…' })
      : typeof events === 'string' ? h('p', { class: 'error-text', text: events })
      : events.length === 0 ? h('p', { class: 'help', text: 'Nothing has happened yet.' })
      // newest first: the question is usually "what happened last"
      : h('ol', { class: 'timeline', 'aria-labelledby': id }, events.slice().reverse().map((e) =>
        h('li', { class: BAD_EVENTS.has(e.type) ? 'bad' : e.type === 'certificate_issued' || e.type === 'verified' || e.type === 'recovered' ? 'good' : '' },
          h('time', { datetime: e.at, text: formatDate(e.at, true) }),
          h('strong', { text: EVENT_WORDS[e.type] || e.type }),
          h('span', { text: e.message }))));
    return h('div', { class: 'timeline-block' }, h('h3', { id, text: 'Timeline (newest first)' }), body);
  }

  async function loadTimeline(host) {
    try {
      state.timelines.set(host, await api('GET', projectPath() + '/domains/' + enc(host) + '/events'));
    } catch (err) {
      if (err.status === 401) return;
      state.timelines.set(host, err.message);
    }
  }

  async function toggleTimeline(host) {
    if (state.openTimelines.has(host)) { state.openTimelines.delete(host); render(); return; }
    state.openTimelines.add(host);
    render();
    await loadTimeline(host);
    if (state.openTimelines.has(host)) render();
  }

  function recordsBlock(domain) {
    const records = domain.records || [];
    // record names are relative to the registrable domain: "shop" for shop.example.com, "@" for the apex
    const main = records.find((r) => r.type === 'CNAME' || r.type === 'ALIAS');
    const zone = main && main.name !== '@' && domain.hostname.startsWith(main.name + '.') ? domain.hostname.slice(main.name.length + 1) : domain.hostname;
    const id = 'records-' + domain.hostname;
    return h('div', { class: 'records table-wrap', 'data-scroll': 'records:' + domain.hostname },
      h('h3', { id, text: domain.status === 'verified' ? 'DNS records' : 'DNS records to create at your DNS provider' }),
      h('table', { 'aria-labelledby': id },
        h('thead', {}, h('tr', {}, ['Type', 'Name', 'Value', 'TTL'].map((c) => h('th', { scope: 'col', text: c })))),
        h('tbody', {}, records.map((r) => [
          h('tr', {},
            h('td', { class: 'mono nowrap', text: r.type }),
            h('td', { class: 'mono', text: r.name }),
            h('td', { class: 'value' }, h('span', { class: 'mono', text: r.value }),
              h('button', { type: 'button', class: 'btn small', 'aria-label': 'Copy value ' + r.value, 'data-focus': 'copy:' + domain.hostname + ':' + r.type + ':' + r.name, text: 'Copy', onclick: (e) => copy(e.currentTarget, r.value) })),
            h('td', { class: 'mono nowrap', text: String(r.ttl) })),
          r.note ? h('tr', {}, h('td', { colspan: '4', class: 'note', text: r.note })) : null,
        ]))),
      h('p', { class: 'help', text: 'Names are relative to ' + zone + ' (@ stands for ' + zone + ' itself); some DNS providers want the full name, ' + domain.hostname + ', instead.' }));
  }
`;

export const DOMAIN_ACTIONS = String.raw`  function verify(button, hostname, again) {
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
        if (err.status === 404) goneElsewhere(hostname, 'is no longer a domain of this project');
        else state.notices.set(hostname, { kind: 'error', text: err.message });
      }
      await refresh();
    });
  }

  // its row is about to go: the page says why, above the table
  function goneElsewhere(hostname, what) {
    const text = hostname + ' ' + what + ': it was removed elsewhere (the CLI, the API or another dashboard). The list below is up to date.';
    state.notices.delete(hostname);
    state.projectNotice = { kind: 'info', text };
    say(text);
  }

  function makePrimary(button, hostname) {
    return busy(button, 'Saving…', async () => {
      try {
        await api('PATCH', projectPath() + '/domains/' + enc(hostname), { primary: true });
        state.notices.set(hostname, { kind: 'success', text: hostname + ' is now the primary domain.' });
      } catch (err) {
        if (err.status === 401) return;
        if (err.status === 404) goneElsewhere(hostname, 'is no longer a domain of this project');
        else state.notices.set(hostname, { kind: 'error', text: err.message });
      }
      await refresh();
    });
  }

  // What removing this domain does, said for the case at hand: a domain never verified was never
  // served; a redirect domain's visitors were being sent on, not served this project; a certificate is
  // deleted only when there is one; and redirects of this project that lead to it then lead to a 404.
  function removalWords(domain) {
    const host = domain.hostname;
    const served = domain.status === 'verified';
    const certificate = domain.certificate && domain.certificate.status === 'issued' ? ' Its certificate is deleted.' : '';
    const into = state.project.domains.filter((d) => d.redirect && d.redirect.to === host).map((d) => d.hostname);
    const warning = !served ? host + ' is not verified, so it has never been served: no visitor notices its removal.' + certificate
      : domain.redirect ? 'The redirect from ' + host + ' to ' + domain.redirect.to + ' stops at once, everywhere: visitors of ' + host + ' get an error page instead of being sent on.' + certificate
      : 'Traffic on ' + host + ' stops at once, everywhere: visitors get an error page instead of this project.' + certificate;
    const leading = into.length === 0 ? ''
      : into.length === 1 ? ' ' + into[0] + ' redirects to ' + host + ': that redirect will then lead to a 404 page. Remove or change it too.'
      : ' ' + into.join(', ') + ' redirect to ' + host + ': those redirects will then lead to a 404 page. Remove or change them too.';
    return {
      title: 'Remove ' + host + '?',
      warning: warning + leading,
      more: (domain.primary ? 'It is the primary domain: another verified domain becomes primary, if there is one. ' : '') + (served ? 'To serve it again you would have to add it and verify it again.' : 'To use it later you would have to add it again.'),
      confirm: 'Remove domain',
    };
  }

  function confirmRemove(button, domain) {
    const host = domain.hostname;
    confirmRemoval(button, removalWords(domain), () => busy(button, 'Removing…', async () => {
      try {
        await api('DELETE', projectPath() + '/domains/' + enc(host));
        state.notices.delete(host);
        say(host + ' removed');
      } catch (err) {
        if (err.status === 401) return;
        if (err.status === 404) goneElsewhere(host, 'is gone already');
        else state.notices.set(host, { kind: 'error', text: err.message });
      }
      await refresh();
      if (document.activeElement === document.body) $('add-hostname').focus();
    }));
  }
`;
