// The dashboard script's project picker: the start after sign-in, its retry after a reload, and
// opening the project chosen. Part of script.ts's String.raw literal, set in where it stands inside that
// script's closure ($, h, state, api, show, setText, resetDomainList, loadProject, schedulePoll,
// TOKEN_KEY and PROJECT_KEY are defined there); plain ES2020, no backquotes. The sign-in
// (admin-token.ts) uses startApp and startFailed.
export const PROJECT_PICKER = String.raw`  // 2. project picker
  async function startApp() {
    const projects = await api('GET', '/admin/projects');
    state.restart = false;
    setText($('app-error'), '');
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
    if (initial) await openProject(initial);
    else { show($('project-view'), false); select.focus(); }
  }

  // A reload with the token kept: when Portico cannot answer (its state store down: 503), the page
  // says so and tries again by itself (refresh.ts) until it has the projects; a 401 signs out.
  async function restartApp() {
    state.loading++;
    try {
      await startApp();
    } catch (err) {
      if (err.status === 401) return;
      startFailed(err);
    } finally {
      state.loading--;
    }
  }

  // signed in (the token kept), the projects not read yet: the error in view, tried again on the poll
  function startFailed(err) {
    state.restart = true;
    show($('login'), false);
    show($('app'), true);
    show($('sign-out'), true);
    showAppError(err);
    schedulePoll();
  }

  $('project').addEventListener('change', (event) => { openProject(event.target.value); });

  // a project that cannot be loaded now is tried again on the poll (refresh.ts); meanwhile no other
  // project's tables stay in view under its name (their buttons would act on the project selected)
  function openProject(id) {
    return selectProject(id).catch((err) => {
      if (!state.project || state.project.id !== state.projectId) { show($('project-view'), false); show($('project-meta'), false); }
      showAppError(err);
      schedulePoll();
    });
  }

  async function selectProject(id) {
    state.projectId = id || null;
    resetDomainList();
    state.notices.clear();
    state.openRecords.clear();
    state.openTimelines.clear();
    state.timelines.clear();
    state.projectNotice = null;
    setText($('add-error'), '');
    setText($('redirect-error'), '');
    if (!id) { sessionStorage.removeItem(PROJECT_KEY); show($('project-view'), false); show($('project-meta'), false); return; }
    sessionStorage.setItem(PROJECT_KEY, id);
    await loadProject();
  }

  function showAppError(err) { if (err && err.status !== 401) setText($('app-error'), err.message); }
`;
