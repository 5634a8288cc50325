// The dashboard script's admin token: signing out (which clears every trace of the project from the
// page) and the sign-in form, which refuses a token that is not printable ASCII. Part of script.ts's
// String.raw literal, set in where it stands inside that script's closure ($, state, show, setText,
// resetDomainList, startApp, startFailed, TOKEN_KEY and PROJECT_KEY are defined there); plain ES2020,
// no backquotes.
export const ADMIN_TOKEN = String.raw`  // 1. token
  function signOut(reason) {
    state.generation++;
    clearTimeout(state.poll);
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(PROJECT_KEY);
    Object.assign(state, { token: null, projectId: null, project: null, projectNotice: null, shown: '', restart: false });
    for (const kept of [state.notices, state.openRecords, state.openTimelines, state.timelines]) kept.clear();
    // nothing of the project stays in the page, hidden or not
    for (const id of ['domains', 'redirects', 'redirect-from', 'project']) $(id).replaceChildren();
    resetDomainList();
    for (const id of ['crumb-project', 'meta-default', 'meta-upstream', 'domains-count']) $(id).textContent = '';
    for (const id of ['app-error', 'add-error', 'redirect-error', 'domains-notice']) setText($(id), '');
    show($('project-view'), false);
    show($('project-meta'), false);
    if ($('remove-dialog').open) $('remove-dialog').close();
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
    // fetch refuses a header with a character past Latin-1, and curl or the CLI send non-ASCII as UTF-8
    // where a browser sends Latin-1: only printable ASCII means the same everywhere (generated tokens
    // are base64url)
    const odd = token.match(/[^\x20-\x7e]/u);
    if (odd) {
      setText($('token-error'), 'The admin token can only contain printable ASCII characters (letters, digits, punctuation), not "' + odd[0] + '". Check that it was copied whole and unchanged.');
      $('token').setAttribute('aria-invalid', 'true');
      return;
    }
    state.token = token;
    setText($('token-error'), '');
    try {
      await startApp();
    } catch (err) {
      // 503: the token was taken (the admin API checks it before reading anything) and Portico cannot
      // read its state now: signed in, the page says so and tries again by itself, as after a reload
      if (err.status === 503) {
        sessionStorage.setItem(TOKEN_KEY, state.token);
        startFailed(err);
      } else if (err.status !== 401) setText($('token-error'), err.message);
    }
  });
  $('sign-out').addEventListener('click', () => signOut(''));
`;
