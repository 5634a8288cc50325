// The served OpenAPI description is valid (redocly lint, recommended rules) and matches what the API does.
import t from 'tap';
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { startPortico, tempDir } from '../helpers/portico.ts';
import { api } from '../helpers/client.ts';
import { withEnv } from '../helpers/config-bed.ts';
import { openapiDocument } from '../../src/api/openapi.ts';

const portico = await startPortico();
t.teardown(() => portico.stop());

t.test('GET /v1/openapi.json passes redocly lint', async (t) => {
  const answer = await api(portico.ports.https, portico.ca, null, { path: '/v1/openapi.json' });
  t.equal(answer.status, 200);
  t.ok(answer.headers['x-ratelimit-limit'], 'counted per IP like every /v1 call');
  const doc = answer.json;
  t.same(Object.keys(doc.components.schemas).sort(), ['Category', 'Error', 'NewCategory']);
  t.equal(doc.paths['/pets/{petId}'].get.deprecated, true);
  t.ok(doc.paths['/categories'].get.responses['429'].headers['Retry-After']);
  t.same(doc.components.securitySchemes.bearer, { type: 'http', scheme: 'bearer', description: doc.components.securitySchemes.bearer.description });
  const file = path.join(tempDir('openapi'), 'openapi.json');
  writeFileSync(file, answer.text);
  const cli = createRequire(import.meta.url).resolve('@redocly/cli/bin/cli.js');
  const result = await new Promise<{ code: number; output: string }>((resolve) => {
    execFile(process.execPath, [cli, 'lint', '--format', 'stylish', file], { env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' }, timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, output: `${stdout}${stderr}` }),
    );
  });
  t.equal(result.code, 0, `redocly lint passes:\n${result.output}`);
  t.notMatch(result.output, /\berror\b/i, 'no errors');
});

t.test('servers name the port clients use (PORTICO_PUBLIC_HTTPS_PORT) and bracket an IPv6 host', async (t) => {
  const servers = (env: Record<string, string>) => (openapiDocument(withEnv(env)) as { servers: Array<{ url: string }> }).servers.map((s) => s.url);
  t.same(servers({}), ['https://api.localhost/v1', 'https://api.staging.localhost/v1'], '443: no port');
  // generated clients called port 443 when Portico was reached on another
  t.same(servers({ PORTICO_PUBLIC_HTTPS_PORT: '8443' }), ['https://api.localhost:8443/v1', 'https://api.staging.localhost:8443/v1']);
  t.same(servers({ PORTICO_STAGING_API_HOSTS: '::1' }), ['https://api.localhost/v1', 'https://[::1]/v1']);
});
