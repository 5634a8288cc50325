// Reads a JSON request body with a size cap. Outcomes are HttpErrors with stable codes:
// 415 without a JSON content type, 413 past the cap (without reading the rest), 400 when the body is
// not JSON or not an object.
import type { IncomingMessage } from 'node:http';
import type { Http2ServerRequest } from 'node:http2';
import { HttpError } from '../errors.ts';

export type Request = IncomingMessage | Http2ServerRequest;

// fatal: invalid bytes are refused, not silently turned into U+FFFD
const UTF8 = new TextDecoder('utf-8', { fatal: true });

export function isJsonContentType(value: string | undefined): boolean {
  if (!value) return false;
  const type = value.split(';', 1)[0].trim().toLowerCase();
  return type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json'));
}

/**
 * `optional`: an empty body reads as `{}` whatever its content type (admin calls that need no body):
 * `curl -d ''` sends `Content-Type: application/x-www-form-urlencoded` with nothing after it, and a
 * chunked body may end without a byte. A body with bytes in it must still be JSON.
 */
export async function readJsonObject(req: Request, maxBytes: number, { optional = false } = {}): Promise<Record<string, unknown>> {
  const contentType = req.headers['content-type'];
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > maxBytes) throw tooLarge(maxBytes);
  const empty = declared !== undefined && Number(declared) === 0;
  if (!isJsonContentType(contentType) && !(optional && (empty || declared === undefined))) throw new HttpError('unsupported_media_type');
  const { chunks, size } = await readCapped(req, maxBytes);
  if (size === 0 && optional) return {};
  if (!isJsonContentType(contentType)) throw new HttpError('unsupported_media_type');
  let text: string;
  try {
    text = UTF8.decode(Buffer.concat(chunks, size));
  } catch {
    throw new HttpError('invalid_request', 'The body is not valid UTF-8 (JSON is UTF-8, RFC 8259).');
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new HttpError('invalid_request', `The body is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new HttpError('invalid_request', `The body must be a JSON object, got ${value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value}.`);
  }
  return value as Record<string, unknown>;
}

/**
 * The body's bytes, up to `maxBytes`. Past it, the rest is drained without destroying the request:
 * the HTTP/1.1 connection stays usable after the 413 and over HTTP/2 only the stream ends. Destroying it (as leaving a `for await` early does) reset the
 * HTTP/1.1 connection after an answer that promised keep-alive, and closed the visitor's whole HTTP/2
 * connection.
 */
function readCapped(req: Request, maxBytes: number): Promise<{ chunks: Buffer[]; size: number }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const stop = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('close', onClose);
      req.off('error', onClose);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) {
        stop();
        // the rest is read and dropped, so the connection (HTTP/1.1) or the stream's flow control
        // (HTTP/2) is not left waiting on bytes nobody reads
        req.resume();
        reject(tooLarge(maxBytes));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      stop();
      resolve({ chunks, size });
    };
    // the client went away mid-body: nobody reads the answer, and it is not a failure of ours
    const onClose = () => {
      stop();
      reject(new HttpError('invalid_request', 'The request body ended early: the client closed the connection.'));
    };
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('close', onClose);
    req.once('error', onClose);
  });
}

function tooLarge(maxBytes: number): HttpError {
  return new HttpError('payload_too_large', `The request body is larger than ${maxBytes} bytes.`);
}
