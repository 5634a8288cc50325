// The dashboard script's project loading: after an action, on a poll (every 5 s while a DNS check or
// a certificate order is under way, every 30 s otherwise, so changes made with the CLI or elsewhere
// show up) and when the owner comes back to the tab. A start or a project load that failed (Portico
// or its state store not answering) is tried again the same way, every 5 s, until it succeeds. Part
// of script.ts's String.raw literal, set in where it stands inside that script's closure ($, state,
// api, enc, loadTimeline, render, restartApp, setText and showAppError are defined there); plain
// ES2020, no backquotes.
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
      // after an action, its notice belongs on its row even when the project could not be read again
      if (!quiet && state.project && state.project.id === state.projectId) render();
      // keep looking: Portico may be back at the next poll
      else schedulePoll();
    }
  }

  // what the page looks at again: the start that failed, else the open project; nothing while the
  // owner has yet to pick a project, or after signing out
  const lookingAt = () => (!state.token ? null : state.restart ? 'start' : state.projectId ? 'project' : null);

  function lookAgain() {
    if (lookingAt() === 'start') restartApp();
    else refresh(true);
  }

  // DNS checks and certificate orders happen in the background: follow them every 5 s until they
  // settle. Changes made elsewhere (the CLI, the API, another dashboard) show within 30 s, and at once
  // when the owner comes back to this tab. What could not be loaded is asked for again every 5 s.
  function schedulePoll() {
    clearTimeout(state.poll);
    if (!lookingAt()) return;
    const project = lookingAt() === 'project' && state.project && state.project.id === state.projectId ? state.project : null;
    const waiting = !project || project.domains.some((d) => d.status === 'pending' || (d.certificate && (d.certificate.status === 'pending' || d.certificate.status === 'queued' || (d.status === 'verified' && d.certificate.status === 'none'))));
    state.poll = setTimeout(() => {
      if (state.busy > 0 || document.hidden || $('remove-dialog').open) schedulePoll();
      else lookAgain();
    }, waiting ? 5000 : 30000);
  }

  function refreshOnReturn() {
    if (lookingAt() && state.loading === 0 && state.busy === 0 && !document.hidden && !$('remove-dialog').open) lookAgain();
  }
  window.addEventListener('focus', refreshOnReturn);
  document.addEventListener('visibilitychange', refreshOnReturn);
`;
