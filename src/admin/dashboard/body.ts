// The dashboard's markup; the script fills it from the admin API.
export const BODY = String.raw`
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
        <p class="muted">Serve this project on your own hostnames. Add a domain and create the DNS record shown: Portico checks it by itself, and the certificate follows. Each domain’s timeline tells what happened and why.</p>
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
        <p id="domains-notice" class="notice" role="status" hidden></p>
        <div id="domains-list-controls" class="list-controls" hidden>
          <div class="field"><label for="domains-filter">Filter domains</label><input id="domains-filter" type="search" autocomplete="off" spellcheck="false" placeholder="Part of a hostname, or pending, verified, failed, misconfigured"></div>
          <p id="domains-range" class="muted" role="status"></p>
          <div id="domains-pages" class="inline" hidden><button type="button" id="domains-prev" class="btn small">Previous</button><button type="button" id="domains-next" class="btn small">Next</button></div>
        </div>
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
