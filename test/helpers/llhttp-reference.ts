// The reference for Portico's HTTP/1.1 upstream client: llhttp, the parser behind Node's own HTTP
// client, in its strict mode (no lenient flags), driven as node:http's client drives it: 1xx answers
// other than 101 are skipped, a HEAD answer has no body, the first complete answer is the verdict
// (bytes after it are the next answer's problem), and the end of the input is the upstream's close.
import { createRequire } from 'node:module';
import { UpstreamError, type Http1Client, type Sink } from '../../src/proxy/http1-client.ts';

export type Verdict =
  | { accepted: true; status: number; headers: string[]; body: string }
  | { accepted: false; why: string };

interface Parser {
  initialize(type: number, resource: object, maxHeaderSize: number, lenient: number): void;
  execute(data: Buffer): number | Error;
  finish(): undefined | Error;
  close(): void;
  [key: number]: unknown;
}
interface ParserClass {
  new (): Parser;
  RESPONSE: number;
  REQUEST: number;
  kOnHeaders: number;
  kOnHeadersComplete: number;
  kOnBody: number;
  kOnMessageComplete: number;
}

// node:http's own parser binding (lib/_http_common.js): the same llhttp build Node's client uses
const { HTTPParser, methods: LLHTTP_METHODS } = createRequire(import.meta.url)('_http_common') as { HTTPParser: ParserClass; methods: string[] };

/** What llhttp makes of `parts` (fed in that order, then the close) as the answer to `method`. */
export function llhttpVerdict(parts: Buffer[], method: string): Verdict {
  const parser = new HTTPParser();
  parser.initialize(HTTPParser.RESPONSE, {}, 0, 0);
  let headers: string[] = [];
  let status = 0;
  let body: Buffer[] = [];
  let verdict: Verdict | null = null;
  // fields that come after the head are trailers: checked by llhttp, dropped by Portico (a proxy may)
  let inHead = true;
  parser[HTTPParser.kOnHeaders] = (more: string[]) => {
    if (inHead) headers.push(...more);
  };
  parser[HTTPParser.kOnHeadersComplete] = (_major: number, _minor: number, fields: string[] | undefined, _method: unknown, _url: unknown, statusCode: number) => {
    if (fields) headers.push(...fields);
    status = statusCode;
    inHead = false;
    // node:http's client: 101 is an upgrade nobody asked for; other 1xx are skipped, body and all
    if (statusCode === 101) {
      verdict = { accepted: false, why: 'unexpected 101' };
      return 1;
    }
    if (statusCode >= 100 && statusCode < 200) {
      headers = [];
      return 1;
    }
    return method === 'HEAD' ? 1 : 0;
  };
  parser[HTTPParser.kOnBody] = (chunk: Buffer) => {
    body.push(Buffer.from(chunk));
  };
  parser[HTTPParser.kOnMessageComplete] = () => {
    if (verdict !== null) return;
    if (status >= 100 && status < 200) {
      body = [];
      inHead = true;
      return;
    }
    verdict = { accepted: true, status, headers: lowerPairs(headers), body: Buffer.concat(body).toString('latin1') };
  };
  try {
    for (const part of parts) {
      const result = parser.execute(part);
      if (verdict !== null) return verdict;
      if (result instanceof Error) return { accepted: false, why: (result as NodeJS.ErrnoException).code ?? result.message };
    }
    const end = parser.finish();
    if (verdict !== null) return verdict;
    return { accepted: false, why: end instanceof Error ? ((end as NodeJS.ErrnoException).code ?? end.message) : 'incomplete at the close' };
  } finally {
    parser.close();
  }
}

function lowerPairs(raw: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) out.push(raw[i].toLowerCase(), raw[i + 1]);
  return out;
}

export interface Message {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Every complete answer in what a visitor's HTTP/1.1 connection received, in order, read by llhttp:
 * how a pipelining client (or a proxy in front of Portico) would split the stream. `rest` is true when
 * bytes were left that no complete answer explains.
 */
export function llhttpMessages(data: Buffer, methods: string[]): { messages: Message[]; rest: boolean } {
  const parser = new HTTPParser();
  parser.initialize(HTTPParser.RESPONSE, {}, 0, 0);
  const messages: Message[] = [];
  let current: Message | null = null;
  let fields: string[] = [];
  parser[HTTPParser.kOnHeaders] = (more: string[]) => {
    if (current === null) fields.push(...more);
  };
  parser[HTTPParser.kOnHeadersComplete] = (_major: number, _minor: number, rawFields: string[] | undefined, _m: unknown, _u: unknown, status: number) => {
    if (rawFields) fields.push(...rawFields);
    const headers: Record<string, string> = {};
    for (let i = 0; i < fields.length; i += 2) headers[fields[i].toLowerCase()] = fields[i + 1];
    fields = [];
    current = { status, headers, body: '' };
    return methods[messages.length] === 'HEAD' ? 1 : 0;
  };
  parser[HTTPParser.kOnBody] = (chunk: Buffer) => {
    if (current) current.body += Buffer.from(chunk).toString('latin1');
  };
  parser[HTTPParser.kOnMessageComplete] = () => {
    if (current) messages.push(current);
    current = null;
  };
  try {
    const result = parser.execute(data);
    const end = parser.finish();
    return { messages, rest: result instanceof Error || end instanceof Error || current !== null };
  } finally {
    parser.close();
  }
}

// llhttp in request mode, as node:http's server drives it

export interface Read {
  method: string;
  url: string;
  /** lowercased names, Host and Connection left out (each client writes its own) */
  fields: string[];
  body: string;
}

/** every request llhttp reads from `data`, and whether bytes were left that no complete request explains */
export function llhttpRequests(data: Buffer): { requests: Read[]; rest: boolean } {
  const parser = new HTTPParser();
  parser.initialize(HTTPParser.REQUEST, {}, 0, 0);
  const requests: Read[] = [];
  let fields: string[] = [];
  let current: Read | null = null;
  parser[HTTPParser.kOnHeaders] = (more: string[]) => fields.push(...more);
  parser[HTTPParser.kOnHeadersComplete] = (_major: number, _minor: number, raw: string[] | undefined, method: number, url: string) => {
    if (raw) fields.push(...raw);
    const kept: string[] = [];
    for (let i = 0; i < fields.length; i += 2) {
      const name = fields[i].toLowerCase();
      if (name !== 'host' && name !== 'connection') kept.push(name, fields[i + 1]);
    }
    fields = [];
    current = { method: LLHTTP_METHODS[method], url, fields: kept, body: '' };
    return 0;
  };
  parser[HTTPParser.kOnBody] = (chunk: Buffer) => {
    if (current) current.body += Buffer.from(chunk).toString('latin1');
  };
  parser[HTTPParser.kOnMessageComplete] = () => {
    if (current) requests.push(current);
    current = null;
  };
  try {
    const result = parser.execute(data);
    const end = parser.finish();
    return { requests, rest: result instanceof Error || end instanceof Error || current !== null };
  } finally {
    parser.close();
  }
}

/** What Portico's own HTTP/1.1 client makes of the answer to `method target` from `origin`, as a Verdict beside llhttp's. */
export async function porticoVerdict(client: Http1Client, origin: string, method: string, target: string): Promise<Verdict> {
  let status = 0;
  let headers: string[] = [];
  const body: Buffer[] = [];
  const sink: Sink = {
    write: (chunk) => {
      body.push(Buffer.from(chunk));
      return true;
    },
    end: (chunk) => {
      if (chunk) body.push(Buffer.from(chunk));
    },
    once: () => undefined,
  };
  const call = client.request(origin, {
    head: `${method} ${target} HTTP/1.1\r\n`,
    method,
    body: null,
    onHead(code, fields) {
      status = code;
      headers = fields;
      return sink;
    },
  });
  try {
    await call.done;
    return { accepted: true, status, headers, body: Buffer.concat(body).toString('latin1') };
  } catch (err) {
    return { accepted: false, why: err instanceof UpstreamError ? err.kind : String(err) };
  }
}
