import { openEmbeddedStores } from '../../src/state/embedded.ts';
try { const s = await openEmbeddedStores(process.argv[2]!); console.log('OPENED', process.pid); setTimeout(() => s.close(), Number(process.argv[3] ?? 0)); }
catch (err) { console.log((err as any).code, (err as Error).message); }
