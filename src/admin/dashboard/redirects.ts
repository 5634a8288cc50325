// The dashboard script's redirect actions: the add form and the remove buttons. Part of script.ts's
// String.raw literal, set in where it stands inside that script's closure (api, busy, refresh, say,
// setText, projectPath and enc are defined there); plain ES2020, no backquotes.
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
`;
