// targetOf() takes a fast path for ordinary paths; it must agree with the URL-parser version always.
import t from 'tap';
import { targetOf, targetUrl } from '../../src/proxy/project-proxy.ts';

const upstreams = ['http://10.0.0.1:8080', 'http://10.0.0.1:8080/', 'http://10.0.0.1:8080/app', 'https://origin.example/app/v2/'];
const paths = ['/', '/a/b?x=1&y=%20', '/a?q', '/../../etc/passwd', '/%2e%2e/x', '/%2E%2E/x', '//evil.example/x', '/a/./b', '/a/b/..', '/.well-known/x', '/a\\b', '/x?next=/../y', '/caf%C3%A9', 'http://host/abs?x', '*'];

t.test('fast path and URL parser agree', async (t) => {
  for (const upstream of upstreams) {
    for (const path of paths) {
      const slow = targetUrl(upstream, path);
      t.same(targetOf(upstream, path), { origin: slow.origin, path: slow.pathname + slow.search }, `${upstream} + ${path}`);
    }
  }
});
