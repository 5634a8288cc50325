// Small HTML pages for people who land on a hostname in a browser.
import type { Response } from '../errors.ts';

export function sendPage(res: Response, status: number, html: string, headers: Record<string, string> = {}): void {
  for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
  res.setHeader('content-type', 'text/html; charset=utf-8');
  res.setHeader('content-length', Buffer.byteLength(html));
  res.setHeader('cache-control', 'no-store');
  res.statusCode = status;
  res.end(html);
}

export function notFoundPage(hostname: string): string {
  return page('404 — not served here', `<p>Portico does not serve <code>${escapeHtml(hostname || 'this address')}</code>.</p>
<p>If this is your domain, add it to a project and create the DNS record the dashboard shows.</p>`);
}

export function notDeployedPage(hostname: string): string {
  return page('Nothing deployed yet', `<p><code>${escapeHtml(hostname)}</code> belongs to a project that has no deploy yet.</p>`);
}

/** 502: the project's upstream refused the connection, reset it, or sent something unusable. */
export function upstreamUnreachablePage(hostname: string): string {
  return page('502 — the site is not answering', `<p>Portico reached <code>${escapeHtml(hostname)}</code>, but the application behind it could not be reached.</p>
<p>This is usually temporary (a deploy or restart in progress): try again in a minute.</p>
<p>If this is your site, check that your application is running and accepting connections at the upstream address configured for the project.</p>`);
}

/** 502: the upstream answered, but not with HTTP/1.1 Portico can pass on safely (kind 'invalid_response'). */
export function upstreamInvalidPage(hostname: string): string {
  return page('502 — the site sent an answer that could not be passed on', `<p>The application behind <code>${escapeHtml(hostname)}</code> answered, but its answer was not valid HTTP/1.1, or was too large to pass on, so Portico did not forward it.</p>
<p>If this is your site, check the status line and headers your application sends: for example both <code>Content-Length</code> and <code>Transfer-Encoding</code>, two <code>Content-Length</code> fields, a malformed chunk, control characters in a header, more than 32 interim (1xx) answers, or a head too large for an HTTP/2 visitor (about 64 KiB of header fields). Such answers could be read in two ways by the clients behind Portico, or not delivered at all, so they are refused.</p>`);
}

/** The page for an upstream failure before the visitor got a byte: 504 for a timeout, else 502. */
export function upstreamFailurePage(kind: string | undefined, hostname: string): { status: number; html: string } {
  if (kind === 'timeout') return { status: 504, html: upstreamTimeoutPage(hostname) };
  return { status: 502, html: kind === 'invalid_response' ? upstreamInvalidPage(hostname) : upstreamUnreachablePage(hostname) };
}

/** 504: the upstream accepted the request but did not answer within the proxy timeout. */
export function upstreamTimeoutPage(hostname: string): string {
  return page('504 — the site took too long to answer', `<p>The application behind <code>${escapeHtml(hostname)}</code> did not answer in time.</p>
<p>It may be busy or starting up: try again in a minute.</p>
<p>If this is your site, look for slow or stuck requests in your application; Portico waits a limited time for the response headers.</p>`);
}

export function page(title: string, body: string): string {
  return `<!doctype html><html lang="en"><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>${escapeHtml(title)}</title><style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:4rem auto;padding:0 1rem;color:#222}code{background:#f3f3f3;padding:0 .2em}</style>
<h1>${escapeHtml(title)}</h1>${body}</html>\n`;
}

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
