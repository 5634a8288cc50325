// The contract of a bench scenario (bench/scenarios/README.md): from the run's context, either a
// scenario to measure, or a string saying why it cannot run here.
import type { BenchContext } from './context.ts';
import type { Custom, Measured } from './measure.ts';

export interface ScenarioDefinition {
  /** its name in BENCH_ONLY */
  id: string;
  plan(ctx: BenchContext): Measured | Custom | string | Promise<Measured | Custom | string>;
}
