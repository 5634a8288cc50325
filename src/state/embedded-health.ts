// Whether the embedded data dir takes writes: its logs (append-log.ts) and the domain body files
// (embedded-domains.ts) report failed writes here, and while they fail every log is probed until all
// of them take writes again. embedded.ts tells the operator of each change and answers health() by it.
import type { WriteReports } from './append-log.ts';

/** how often logs are probed while writes to the data dir fail */
const PROBE_EVERY_MS = 1000;

/**
 * Whether the data dir takes writes, for /readyz and the log. A failed write marks it failing (one
 * `onChange`); from then on every log that watches it is probed once a second, and once all of them
 * take a block of writes again it is healthy (one more `onChange`). A write that happens to succeed
 * meanwhile (into the free bytes of a full disk's last page) does not end it: only a probe does.
 */
export class WriteHealth implements WriteReports {
  #failing: { file: string; err: unknown } | null = null;
  /** counts failures, so a probe that began before one cannot end it */
  #failures = 0;
  #probes = new Set<() => Promise<void>>();
  #checking: Promise<boolean> | null = null;
  #timer: NodeJS.Timeout | null = null;
  #onChange: (failing: { file: string; err: unknown } | null) => void;

  constructor(onChange: (failing: { file: string; err: unknown } | null) => void) {
    this.#onChange = onChange;
  }

  watch(probe: () => Promise<void>): () => void {
    this.#probes.add(probe);
    return () => {
      this.#probes.delete(probe);
      if (this.#probes.size === 0 && this.#timer) {
        clearTimeout(this.#timer);
        this.#timer = null;
      }
    };
  }

  failed(file: string, err: unknown): void {
    this.#failures++;
    if (this.#failing) return;
    this.#failing = { file, err };
    this.#onChange(this.#failing);
    this.#schedule();
  }

  /** true when writes are not failing; while they are, probes first (one probe at a time) */
  check(): Promise<boolean> {
    if (!this.#failing) return Promise.resolve(true);
    return (this.#checking ??= this.#probe().finally(() => (this.#checking = null)));
  }

  async #probe(): Promise<boolean> {
    const failures = this.#failures;
    try {
      for (const probe of this.#probes) await probe();
    } catch {
      return false;
    }
    if (failures !== this.#failures || !this.#failing) return !this.#failing;
    this.#failing = null;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#onChange(null);
    return true;
  }

  #schedule(): void {
    if (this.#timer || this.#probes.size === 0) return;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.check().then((ok) => {
        if (!ok) this.#schedule();
      });
    }, PROBE_EVERY_MS).unref();
  }
}
