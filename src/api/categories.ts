// The category store's HTTP face: GET list, GET one, POST create (DESIGN §4).
import { HttpError } from '../errors.ts';
import type { Category } from '../state/types.ts';

const MAX_NAME = 100;
const MAX_DESCRIPTION = 1000;
/** C0, DEL and C1: invisible in a list, and a NUL or an escape sequence in a name is never meant */
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
/**
 * Bidirectional embeddings, overrides and isolates: they reorder how the text after them is shown
 * (Trojan Source, CVE-2021-42574), so a name could read in a list as another one. A label needs none;
 * the marks (U+200E, U+200F) stay allowed.
 */
const BIDI = /[\u202a-\u202e\u2066-\u2069]/;
/** nothing to see: format characters (zero-width space, joiners, soft hyphen…) and separators alone */
const INVISIBLE = /^[\p{Cf}\p{Z}]*$/u;

/** NewCategory → the fields to store. Unknown fields are ignored; absent optional fields stay absent. */
export function parseNewCategory(body: Record<string, unknown>): Omit<Category, 'id'> {
  const { name, description } = body;
  if (name === undefined) throw new HttpError('invalid_request', '"name" is required.');
  if (typeof name !== 'string') throw new HttpError('invalid_request', `"name" must be a string, got ${describe(name)}.`);
  const trimmed = name.trim();
  if (trimmed === '') throw new HttpError('invalid_request', '"name" must not be empty.');
  if ([...trimmed].length > MAX_NAME) throw new HttpError('invalid_request', `"name" must be at most ${MAX_NAME} characters.`);
  if (CONTROL.test(trimmed)) throw new HttpError('invalid_request', '"name" must not contain control characters (such as NUL, tab or a line break).');
  // a lone surrogate (\ud800 in the JSON) is no character: stored, it made the environment's whole list
  // JSON that strict parsers (jq, serde_json) refuse
  if (!trimmed.isWellFormed()) throw new HttpError('invalid_request', '"name" must be valid Unicode text (it holds an unpaired surrogate escape such as \\ud800).');
  if (BIDI.test(trimmed)) throw new HttpError('invalid_request', '"name" must not contain bidirectional embedding, override or isolate characters (U+202A–U+202E, U+2066–U+2069): they change how the text around them is shown.');
  if (INVISIBLE.test(trimmed)) throw new HttpError('invalid_request', '"name" must have a visible character (it holds only zero-width or format characters).');
  if (description === undefined) return { name: trimmed };
  if (typeof description !== 'string') throw new HttpError('invalid_request', `"description" must be a string, got ${describe(description)}.`);
  if ([...description].length > MAX_DESCRIPTION) throw new HttpError('invalid_request', `"description" must be at most ${MAX_DESCRIPTION} characters.`);
  // a description may have lines and tabs; nothing else of C0, DEL or C1
  if (CONTROL.test(description.replace(/[\t\n\r]/g, ''))) throw new HttpError('invalid_request', '"description" must not contain control characters other than tab and line breaks.');
  if (!description.isWellFormed()) throw new HttpError('invalid_request', '"description" must be valid Unicode text (it holds an unpaired surrogate escape such as \\ud800).');
  return { name: trimmed, description };
}

/** the longest Idempotency-Key taken (Stripe's limit too) */
const MAX_IDEMPOTENCY_KEY = 255;
const IDEMPOTENCY_KEY = /^[\x21-\x7e]+$/;

/**
 * The `Idempotency-Key` header → the key, or null without one. 1–255 visible ASCII characters, bare
 * (as Stripe takes it) or as the quoted string the IETF draft writes (`"8e03978e-…"`), quotes dropped.
 */
export function parseIdempotencyKey(value: string | string[] | undefined): string | null {
  if (value === undefined) return null;
  const text = Array.isArray(value) ? value.join(', ') : value;
  const key = text.length >= 2 && text.startsWith('"') && text.endsWith('"') ? text.slice(1, -1) : text;
  if (key.length === 0 || key.length > MAX_IDEMPOTENCY_KEY || !IDEMPOTENCY_KEY.test(key) || key.includes('"')) {
    throw new HttpError('invalid_request', `The Idempotency-Key header must be one key of 1 to ${MAX_IDEMPOTENCY_KEY} visible ASCII characters (no spaces or commas between keys), bare or in double quotes.`);
  }
  return key;
}

/** `/v1/categories/{id}` → id, or null when the segment is not an id any category can have. */
export function parseCategoryId(segment: string): number | null {
  if (!/^[1-9][0-9]{0,15}$/.test(segment)) return null;
  const id = Number(segment);
  return Number.isSafeInteger(id) ? id : null;
}

function describe(value: unknown): string {
  return value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value;
}
