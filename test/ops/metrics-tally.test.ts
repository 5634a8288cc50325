// Counting through cells (src/metrics-tally.ts) held to prom-client itself: the same generated
// observations give the same exposition text, and the same sum over workers (AggregatorRegistry), as
// prom-client's own Counter and Histogram.
import t from 'tap';
import { AggregatorRegistry, Counter, Histogram, Registry } from 'prom-client';
import { CounterTallies, TalliedHistogram } from '../../src/metrics-tally.ts';
import { random } from '../helpers/upstream-answers.ts';

const BOUNDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const ROUTES = ['api', 'project', 'redirect'];

/** Values on the bounds, between them, past the last, zero and tiny ones */
function durations(seed: number, n: number): number[] {
  const next = random(seed);
  return Array.from({ length: n }, () => {
    const pick = next();
    if (pick < 0.2) return BOUNDS[Math.floor(next() * BOUNDS.length)];
    if (pick < 0.25) return 0;
    if (pick < 0.3) return 11 + next() * 100;
    return next() ** 4 * 3;
  });
}

function pair() {
  const reference = new Registry();
  const ours = new Registry();
  const histogram = new Histogram({ name: 'd_seconds', help: 'Durations.', labelNames: ['route'] as const, buckets: BOUNDS, registers: [reference] });
  const counter = new Counter({ name: 'answers_total', help: 'Answers.', labelNames: ['route', 'status'] as const, registers: [reference] });
  const tallied = new TalliedHistogram('d_seconds', 'Durations.', BOUNDS);
  ours.registerMetric(tallied.asMetric());
  const cells = new CounterTallies<'route' | 'status'>();
  const oursCounter = new Counter({ name: 'answers_total', help: 'Answers.', labelNames: ['route', 'status'] as const, registers: [ours], collect() { cells.collect(this); } });
  return { reference, ours, histogram, counter, tallied, cells, oursCounter };
}

t.test('the same observations give the same exposition text as prom-client', async (t) => {
  for (const seed of [1, 2, 3, 42, 1234]) {
    const m = pair();
    const next = random(seed * 7);
    for (const value of durations(seed, 2_000)) {
      const route = ROUTES[Math.floor(next() * ROUTES.length)];
      const status = next() < 0.9 ? '200' : '429';
      m.histogram.observe({ route }, value);
      m.tallied.observe(m.tallied.series({ route }), value);
      m.counter.inc({ route, status });
      m.cells.cell({ route, status }).n++;
    }
    t.equal(await m.ours.metrics(), await m.reference.metrics(), `seed ${seed}`);
  }
});

t.test('a cell is counted once per read: a second read adds nothing new, later counts are added', async (t) => {
  const m = pair();
  const cell = m.cells.cell({ route: 'api', status: '200' });
  t.equal(m.cells.cell({ route: 'api', status: '200' }), cell, 'the same labels give the same cell');
  cell.n += 3;
  m.counter.inc({ route: 'api', status: '200' }, 3);
  t.equal(await m.ours.metrics(), await m.reference.metrics());
  t.equal(await m.ours.metrics(), await m.reference.metrics(), 'a second read');
  cell.n += 2;
  m.oursCounter.inc({ route: 'api', status: '200' }, 1);
  m.counter.inc({ route: 'api', status: '200' }, 3);
  t.match(await m.ours.metrics(), /answers_total\{route="api",status="200"\} 6/, "the counter's own inc() and the cell add up");
  t.equal(await m.ours.metrics(), await m.reference.metrics());
});

t.test('summed over workers as prom-client sums its own', async (t) => {
  const workers = [pair(), pair(), pair()];
  workers.forEach((m, i) => {
    for (const value of durations(100 + i, 500)) {
      m.histogram.observe({ route: ROUTES[i % 2] }, value);
      m.tallied.observe(m.tallied.series({ route: ROUTES[i % 2] }), value);
    }
  });
  const sum = async (registries: Registry[]) => AggregatorRegistry.aggregate(await Promise.all(registries.map((r) => r.getMetricsAsJSON()))).metrics();
  t.equal(await sum(workers.map((m) => m.ours)), await sum(workers.map((m) => m.reference)));
});

t.test('what cannot be a duration is not counted; bounds must increase', async (t) => {
  const m = pair();
  const series = m.tallied.series({ route: 'api' });
  m.tallied.observe(series, Number.NaN);
  m.tallied.observe(series, Number.POSITIVE_INFINITY);
  t.equal(series.count, 0);
  t.throws(() => new TalliedHistogram('x', 'X.', [1, 1]), /increasing/);
  t.throws(() => new TalliedHistogram('x', 'X.', [1, Number.POSITIVE_INFINITY]), /finite/);
  m.tallied.observe(series, 0.3);
  m.tallied.reset();
  t.equal(series.count, 0, 'reset empties the series');
  t.match(await m.ours.metrics(), /d_seconds_count\{route="api"\} 0/);
});
