// A command's options, checked before anything is sent: a missing required option or a number that
// is not one is bad usage (exit 2), never a request the server has to refuse, and it is reported
// even where no admin token is available.

/** Bad usage: the command line (or a CLI setting) is wrong; exit 2. */
export class UsageError extends Error {}

export interface Option {
  type: 'string' | 'boolean';
  help: string;
  required?: boolean;
  /** the value is a whole number (digits only): within a range, or one of a list */
  integer?: { min: number; max: number } | readonly number[];
}

export type Values = Record<string, string | number | boolean | undefined>;

export interface Command {
  usage: string;
  summary: string;
  options: Record<string, Option>;
  positionals: string[];
  run(values: Values, positionals: string[]): Promise<void>;
}

export const json: Option = { type: 'boolean', help: 'print the raw JSON answer' };

/** The parsed values with every integer option turned into a number; throws UsageError. */
export function checkOptions(options: Record<string, Option>, values: Record<string, string | boolean | undefined>): Values {
  const checked: Values = { ...values };
  for (const [name, option] of Object.entries(options)) {
    const value = values[name];
    if (value === undefined) {
      if (option.required) throw new UsageError(`--${name} is required (${option.help})`);
      continue;
    }
    if (option.integer && typeof value === 'string') checked[name] = parseInteger(`--${name}`, value, option.integer);
  }
  return checked;
}

/**
 * Digits only: `Number()` would take "", "3.07e2", "0x12f" or " 301 " and `parseInt` "302abc", so
 * neither decides what a flag means.
 */
export function parseInteger(name: string, text: string, accepted: NonNullable<Option['integer']>): number {
  const value = /^[0-9]+$/.test(text) ? Number(text) : NaN;
  if (Array.isArray(accepted)) {
    if (!accepted.includes(value)) throw new UsageError(`${name} must be one of ${accepted.join(', ')} (got "${text}")`);
    return value;
  }
  const { min, max } = accepted as { min: number; max: number };
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `a whole number of at least ${min}` : `a whole number from ${min} to ${max}`;
    throw new UsageError(`${name} must be ${range} (got "${text}")`);
  }
  return value;
}
