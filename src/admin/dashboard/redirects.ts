// The dashboard script's redirect actions: the add form and the remove buttons. Part of script.ts's
// String.raw literal, set in where it stands inside that script's closure (api, busy, refresh, say,
// setText, confirmRemoval, projectPath and enc are defined there); plain ES2020, no backquotes.
export const REDIRECT_ACTIONS = String.raw`  $('redirect-form').addEventListener('submit', (event) => {
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

  // asks first, as a domain's Remove does: visitors of r.from stop being sent on at once
  function removeRedirect(button, r) {
    confirmRemoval(button, {
      title: 'Remove the redirect from ' + r.from + '?',
      warning: r.from + ' stops redirecting to ' + r.to + ' at once, everywhere: this project serves its visitors instead.',
      more: r.from + ' stays a domain of this project. To send its visitors to ' + r.to + ' again you would have to add the redirect again.',
      confirm: 'Remove redirect',
    }, () => busy(button, 'Removing…', async () => {
      try {
        await api('DELETE', projectPath() + '/redirects/' + enc(r.from));
        setText($('redirect-error'), '');
        say('Redirect from ' + r.from + ' removed');
      } catch (err) {
        if (err.status === 401) return;
        setText($('redirect-error'), err.message);
      }
      await refresh();
    }));
  }
`;
