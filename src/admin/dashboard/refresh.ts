// The dashboard script's project loading: after an action, on a poll (every 5 s while a DNS check or
// a certificate order is under way, every 30 s otherwise, so changes made with the CLI or elsewhere
// show up) and when the owner comes back to the tab. Part of script.ts's String.raw literal, set in
// where it stands inside that script's closure ($, state, api, enc, loadTimeline, render, setText and
// showAppError are defined there); plain ES2020, no backquotes.
export const PROJECT_REFRESH = String.raw`  // quiet: a poll or a return to the tab, not an action. It leaves the tables as they are when nothing
  // changed (a rebuild loses the owner's text selection and scroll), and waits for the next one while
  // the owner has text selected in a table.
  async function loadProject(quiet) {
    const id = state.projectId;
    const load = ++state.loads;
    state.loading++;
    try {
      const project = await api('GET', '/admin/projects/' + enc(id));
      if (id !== state.projectId) return;
      // open timelines follow the domain (a check or an order may have happened since)
      await Promise.all([...state.openTimelines].filter((host) => project.domains.some((d) => d.hostname === host)).map(loadTimeline));
      if (id !== state.projectId || load < state.applied) return;
      state.applied = load;
      state.project = project;
      setText($('app-error'), '');
      if (quiet && (shownData() === state.shown || selectingInTables())) schedulePoll();
      else render();
    } finally {
      state.loading--;
    }
  }

  const shownData = () => JSON.stringify([state.project, [...state.openTimelines].map((host) => state.timelines.get(host))]);

  function selectingInTables() {
    const selection = document.getSelection();
    return Boolean(selection && !selection.isCollapsed && (selection.containsNode($('domains-table'), true) || selection.containsNode($('redirects-table'), true)));
  }

  async function refresh(quiet) {
    try {
      await loadProject(quiet);
    } catch (err) {
      showAppError(err);
      // keep looking: Portico may be back at the next poll
      schedulePoll();
    }
  }

  // DNS checks and certificate orders happen in the background: follow them every 5 s until they
  // settle. Changes made elsewhere (the CLI, the API, another dashboard) show within 30 s, and at once
  // when the owner comes back to this tab.
  function schedulePoll() {
    clearTimeout(state.poll);
    if (!state.project) return;
    const waiting = state.project.domains.some((d) => d.status === 'pending' || (d.certificate && (d.certificate.status === 'pending' || d.certificate.status === 'queued' || (d.status === 'verified' && d.certificate.status === 'none'))));
    state.poll = setTimeout(() => {
      if (state.busy > 0 || document.hidden || $('remove-dialog').open) schedulePoll();
      else refresh(true);
    }, waiting ? 5000 : 30000);
  }

  function refreshOnReturn() {
    if (state.project && state.loading === 0 && state.busy === 0 && !document.hidden && !$('remove-dialog').open) refresh(true);
  }
  window.addEventListener('focus', refreshOnReturn);
  document.addEventListener('visibilitychange', refreshOnReturn);
`;
