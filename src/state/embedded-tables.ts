// The embedded backend's tables: JSON values keyed by string, plus monotonic sequences, held in memory
// and made durable by one append log (append-log.ts; embedded.ts opens `<data dir>/state.log`). Every
// change is one LogRecord; once the log holds far more records than there are live entries, it is
// compacted to a snapshot of them.
import { AppendLog, type AppendLogOptions } from './append-log.ts';

type LogRecord =
  | { op: 'put'; t: string; k: string; v: unknown }
  | { op: 'del'; t: string; k: string }
  | { op: 'seq'; n: string; v: number };

const COMPACT_MIN_RECORDS = 10_000;

/** Tables of JSON values keyed by string, plus monotonic sequences, all made durable by one log. */
export class Tables {
  private readonly tables = new Map<string, Map<string, unknown>>();
  private readonly sequences = new Map<string, number>();
  private log!: AppendLog;

  static async open(file: string, options: AppendLogOptions = {}): Promise<Tables> {
    const tables = new Tables();
    tables.log = await AppendLog.open(file, (record) => tables.apply(record as LogRecord), options);
    return tables;
  }

  table<T>(name: string): Map<string, T> {
    let table = this.tables.get(name);
    if (!table) this.tables.set(name, (table = new Map()));
    return table as Map<string, T>;
  }

  /** Readers see the value only once it is durable, so nobody sees data a crash could take back. */
  async put(t: string, k: string, v: unknown): Promise<void> {
    await this.write({ op: 'put', t, k, v });
    this.table(t).set(k, v);
  }

  async del(t: string, k: string): Promise<void> {
    await this.write({ op: 'del', t, k });
    this.table(t).delete(k);
  }

  /** Next value of a sequence, taken synchronously so concurrent callers never share one. */
  next(n: string): { value: number; durable: Promise<void> } {
    const value = (this.sequences.get(n) ?? 0) + 1;
    this.sequences.set(n, value);
    return { value, durable: this.write({ op: 'seq', n, v: value }) };
  }

  close(): Promise<void> {
    return this.log.close();
  }

  private write(record: LogRecord): Promise<void> {
    const written = this.log.append(record);
    const live = [...this.tables.values()].reduce((sum, t) => sum + t.size, 0) + this.sequences.size;
    if (this.log.records > COMPACT_MIN_RECORDS && this.log.records > 4 * live) {
      this.log.requestCompaction(() => this.snapshot());
    }
    return written;
  }

  private snapshot(): LogRecord[] {
    const records: LogRecord[] = [];
    for (const [n, v] of this.sequences) records.push({ op: 'seq', n, v });
    for (const [t, table] of this.tables) for (const [k, v] of table) records.push({ op: 'put', t, k, v });
    return records;
  }

  private apply(record: LogRecord): void {
    if (record.op === 'put') this.table(record.t).set(record.k, record.v);
    else if (record.op === 'del') this.table(record.t).delete(record.k);
    else if (record.op === 'seq') this.sequences.set(record.n, Math.max(record.v, this.sequences.get(record.n) ?? 0));
  }
}
