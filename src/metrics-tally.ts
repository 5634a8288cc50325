// Counting on the request path without prom-client's per-call work. prom-client's inc() and observe()
// validate, hash and look up their label set on every call, children included: with the rate-limit
// decision that was ~10k of a /v1 call's ~159k instructions on the main thread (callgrind, 6,000
// requests after 8,000; docs/performance.md). Here a label set's cell is found once and kept; a
// request adds to plain numbers; the totals reach the exposition (and the sum over workers, which goes
// through get()) when /metrics is read.
import type { Counter, Histogram } from 'prom-client';

/** One label set's count since the counter last collected it. */
export interface Tally {
  n: number;
}

/**
 * Cells of a prom-client Counter: give `collect` to the Counter's configuration, so every read of it
 * adds what the cells counted since the last read. The Counter's own inc() keeps working beside them.
 */
export class CounterTallies<T extends string> {
  readonly #cells = new Map<string, { labels: Partial<Record<T, string | number>>; tally: Tally }>();

  /** The cell of a label set (the same one for the same labels, given in the same order): fetch it once and keep it. */
  cell(labels: Partial<Record<T, string | number>>): Tally {
    const key = JSON.stringify(labels);
    let cell = this.#cells.get(key);
    if (cell === undefined) this.#cells.set(key, (cell = { labels, tally: { n: 0 } }));
    return cell.tally;
  }

  collect(counter: Counter<T>): void {
    for (const { labels, tally } of this.#cells.values()) {
      if (tally.n === 0) continue;
      counter.inc(labels, tally.n);
      tally.n = 0;
    }
  }
}

/** One label set of a TalliedHistogram: per-bucket counts (not cumulative), their sum and count. */
export interface Series {
  readonly labels: Record<string, string>;
  readonly buckets: Float64Array;
  sum: number;
  count: number;
}

/**
 * A Prometheus histogram with prom-client's exposition (registered in its Registry, summed over
 * workers like its own Histogram), observed through Series fetched once per label set.
 */
export class TalliedHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly #series = new Map<string, Series>();
  readonly #bounds: readonly number[];
  readonly name: string;
  readonly help: string;

  constructor(name: string, help: string, bounds: readonly number[]) {
    this.name = name;
    this.help = help;
    if (bounds.some((b, i) => !Number.isFinite(b) || (i > 0 && b <= bounds[i - 1]))) throw new Error(`${name}: bucket bounds must be finite and increasing`);
    this.#bounds = bounds;
  }

  /** The series of a label set (the same one for the same labels, given in the same order): fetch it once and keep it. */
  series(labels: Record<string, string>): Series {
    const key = JSON.stringify(labels);
    let series = this.#series.get(key);
    if (series === undefined) this.#series.set(key, (series = { labels, buckets: new Float64Array(this.#bounds.length), sum: 0, count: 0 }));
    return series;
  }

  observe(series: Series, value: number): void {
    if (!Number.isFinite(value)) return;
    series.sum += value;
    series.count++;
    const bounds = this.#bounds;
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]) {
        series.buckets[i]++;
        return;
      }
    }
  }

  /** As prom-client's Histogram.getForPromString: `le` first, the series' labels shared. */
  async getForPromString() {
    const values: { labels: Record<string, string | number>; sharedLabels: Record<string, string>; value: number; metricName: string }[] = [];
    for (const { labels, buckets, sum, count } of this.#series.values()) {
      let cumulative = 0;
      for (let i = 0; i < this.#bounds.length; i++) {
        cumulative += buckets[i];
        values.push({ labels: { le: this.#bounds[i] }, sharedLabels: labels, value: cumulative, metricName: `${this.name}_bucket` });
      }
      values.push({ labels: { le: '+Inf' }, sharedLabels: labels, value: count, metricName: `${this.name}_bucket` });
      values.push({ labels: {}, sharedLabels: labels, value: sum, metricName: `${this.name}_sum` });
      values.push({ labels: {}, sharedLabels: labels, value: count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  /** As prom-client's Histogram.get: each value's labels whole (what workers send to be summed). */
  async get() {
    const data = await this.getForPromString();
    return { ...data, values: data.values.map(({ labels, sharedLabels, ...value }) => ({ ...value, labels: { ...labels, ...sharedLabels } })) };
  }

  reset(): void {
    for (const series of this.#series.values()) {
      series.buckets.fill(0);
      series.sum = 0;
      series.count = 0;
    }
  }

  /** Registers it with a prom-client Registry, which reads a metric only through the members above. */
  asMetric(): Histogram<string> {
    return this as unknown as Histogram<string>;
  }
}
