// Every scenario, in the order a run measures them (BENCH_ONLY picks by id).
import type { ScenarioDefinition } from '../lib/scenario.ts';
import { scenario as proxy } from './proxy.ts';
import { scenario as h2, oneStream as h2One } from './h2.ts';
import { scenario as h2Paced } from './h2-paced.ts';
import { scenario as h2Large } from './h2-large.ts';
import { scenario as h2Stalled } from './h2-stalled.ts';
import { scenario as v1, topologies } from './v1.ts';
import { scenario as paced } from './paced.ts';
import { scenario as redirect } from './redirect.ts';
import { scenario as handshake } from './handshake.ts';
import { scenario as resume } from './resume.ts';
import { scenario as cluster } from './cluster.ts';
import { scenario as scale } from './scale.ts';
import { scenario as instructions } from './instructions.ts';

export const SCENARIOS: ScenarioDefinition[] = [proxy, h2, h2One, h2Paced, h2Large, h2Stalled, v1, topologies, paced, redirect, handshake, resume, cluster, scale, instructions];
