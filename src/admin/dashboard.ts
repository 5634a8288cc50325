// The Domains dashboard: one self-contained HTML page for GET / on the admin listener.
// It holds no data, so it is served without the token: the page asks for the admin token once, keeps
// it in sessionStorage (this tab only) and drives the admin API of DESIGN §5 with same-origin fetches.
// No build step and no external resources. The style and the script are inline and named by hash in
// dashboardCsp(), so the page also runs under a Content-Security-Policy without 'unsafe-inline'.
// API data only ever reaches the page through textContent and attribute values, never innerHTML.
import { createHash } from 'node:crypto';
import { STYLE } from './dashboard/style.ts';
import { BODY } from './dashboard/body.ts';
import { SCRIPT } from './dashboard/script.ts';

const sha256 = (text: string) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Domains · Portico</title>
<link rel="icon" href="data:,">
<style>${STYLE}</style>
</head>
<body>${BODY}<script>${SCRIPT}</script>
</body>
</html>
`;

// the page's own inline style and script, by hash; fetches go to this origin only
const CSP = [
  "default-src 'none'",
  `script-src ${sha256(SCRIPT)}`,
  `style-src ${sha256(STYLE)}`,
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** The whole dashboard document. */
export function dashboardPage(): string {
  return PAGE;
}

/** A Content-Security-Policy the page runs under (no 'unsafe-inline'); send it with dashboardPage(). */
export function dashboardCsp(): string {
  return CSP;
}
