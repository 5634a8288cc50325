// The dashboard's stylesheet (inline in the page, allowed by hash in its CSP).
export const STYLE = String.raw`
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
.list-controls { display:flex; align-items:flex-end; gap:12px 16px; flex-wrap:wrap; padding:12px 20px; border-bottom:1px solid var(--line); }
.list-controls .field { flex:1 1 320px; }
.list-controls .field input { width:100%; }
.list-controls p { margin:0 0 9px; white-space:nowrap; }
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
.badge.redirect { background:#f3eefe; color:#5b34b4; border-color:#ddd0fa; white-space:normal; }
.badge.queued { background:var(--info-bg); color:var(--accent-dark); border-color:#c7d7fb; }
.badge.misconfigured { background:var(--bad-bg); color:var(--danger); border-color:#f5c2bc; margin-top:4px; }
.btn.spaced { margin-right:14px; }
.timeline-block { margin-top:12px; }
.timeline { list-style:none; margin:0; padding:0 0 0 14px; border-left:2px solid var(--line); }
.timeline li { position:relative; padding:4px 0 8px 10px; display:grid; grid-template-columns:170px 160px 1fr; gap:4px 12px; font-size:13px; }
.timeline li::before { content:""; position:absolute; left:-21px; top:9px; width:10px; height:10px; border-radius:50%; background:var(--line); }
.timeline li.good::before { background:var(--ok); }
.timeline li.bad::before { background:var(--danger); }
.timeline time { color:var(--muted); white-space:nowrap; }
@media (max-width: 720px) { .timeline li { grid-template-columns:1fr; } }
.notice { border-radius:8px; padding:10px 12px; margin:12px 0 0; font-size:13px; border:1px solid; }
.notice.success { background:var(--ok-bg); border-color:#b7e2c4; color:#0f5a2d; }
.notice.error { background:var(--bad-bg); border-color:#f5c2bc; color:#8c1d13; }
.notice.info { background:var(--info-bg); border-color:#c7d7fb; color:#1a3a8a; }
.error-text { color:var(--danger); font-size:13px; margin:8px 0 0; }
#domains-notice { margin:12px 20px 0; }
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
/* hostnames (up to 253 characters), record values and CA errors are long words: they wrap anywhere
   rather than widen the table and push its buttons, or the page, off the screen */
.mono, .sub, .help, .notice, .error-text, .diag p, .timeline span, .badge.redirect, .records td, #redirects td, dialog p { overflow-wrap:anywhere; }
.nowrap { white-space:nowrap; }
select, .inline > .field { max-width:100%; }
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
