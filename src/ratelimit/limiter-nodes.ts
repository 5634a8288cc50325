// Which Redis the limiter's own connections talk to. ioredis owns the topology (redis-connect.ts):
// on Sentinel the current primary is where its connection is, on a Cluster the primary owning the
// subject's slot is in its slot map. This file only keeps one pipelined LimiterConnection per such
// node and follows what Redis answers:
// - `-MOVED slot host:port`: the slot has a new owner; the call goes there at once, and ioredis
//   refreshes its map;
// - `-ASK slot host:port`: the slot is being migrated and the keys are already there; the call goes
//   there once, after ASKING (Redis Cluster spec, "ASK redirection");
// - `-TRYAGAIN`: a multi-key call during a migration; tried again after a short pause;
// - `-READONLY`, `-LOADING`, `-CLUSTERDOWN` or a lost connection: a failover is under way; ioredis is
//   asked to look again, and the call fails (the failover limiter answers it from this instance) unless
//   ioredis already names another primary.
// A call keeps its first deadline through every retry, so none waits past the command timeout.
import { LimiterConnection } from './limiter-connection.ts';
import type { LimiterConnectionOptions } from './limiter-socket.ts';
import { ReplyError, type Reply } from './resp.ts';

export interface LimiterTopology {
  /** the primary for `slot` ("host:port"), or null while there is none */
  primaryFor(slot: number): string | null;
  /** every primary there is now (empty while there is none) */
  primaries(): string[];
  refreshTopology(): void;
}

const RETRIES = 3;
const TRYAGAIN_PAUSE_MS = 20;
const PRUNE_EVERY_MS = 5_000;

export class LimiterNodes {
  readonly #topology: LimiterTopology;
  readonly #options: LimiterConnectionOptions;
  readonly #script: string;
  /** "host:port" → its connection */
  readonly #connections = new Map<string, LimiterConnection>();
  readonly #timer: NodeJS.Timeout;
  #closed = false;

  constructor(topology: LimiterTopology, options: LimiterConnectionOptions, script: string) {
    this.#topology = topology;
    this.#options = options;
    this.#script = script;
    // connections to nodes that are no longer a primary (a failover, a reshard) are closed, or they
    // would keep reconnecting to a dead address
    this.#timer = setInterval(() => this.#prune(), PRUNE_EVERY_MS);
    this.#timer.unref();
  }

  run(slot: number, args: string, argCount: number): Promise<Reply> {
    const connection = this.#connectionFor(slot);
    if (!connection) return Promise.reject(connectionError('Redis has no known primary for this call (a failover is under way)'));
    const deadline = performance.now() + (this.#options.commandTimeoutMs ?? Infinity);
    return connection.run(args, argCount).catch((err: unknown) => this.#recover(err, connection, slot, args, argCount, deadline, RETRIES));
  }

  close(): void {
    this.#closed = true;
    clearInterval(this.#timer);
    for (const connection of this.#connections.values()) connection.close();
    this.#connections.clear();
  }

  async #recover(err: unknown, failed: LimiterConnection, slot: number, args: string, argCount: number, deadline: number, left: number): Promise<Reply> {
    // a timeout names its node, so the stores know whether the server they write to is the frozen one
    if ((err as { code?: string }).code === 'REDIS_TIMEOUT') (err as { node?: string }).node ??= this.#keyOf(failed);
    if (left === 0 || this.#closed || performance.now() >= deadline) throw err;
    let next: LimiterConnection | null = null;
    let asking = false;
    if (err instanceof ReplyError) {
      const [kind, , address] = err.message.split(' ');
      if (kind === 'MOVED' || kind === 'ASK') {
        if (kind === 'MOVED') this.#topology.refreshTopology();
        asking = kind === 'ASK';
        next = this.#connectionAt(address);
      } else if (kind === 'TRYAGAIN') {
        await new Promise((resolve) => setTimeout(resolve, TRYAGAIN_PAUSE_MS));
        next = this.#connectionFor(slot);
      } else if (kind === 'READONLY' || kind === 'LOADING' || kind === 'CLUSTERDOWN') {
        this.#drop(failed);
        this.#topology.refreshTopology();
        throw err;
      } else throw err;
    } else if ((err as { code?: string }).code === 'REDIS_CONNECTION') {
      const address = this.#keyOf(failed);
      this.#drop(failed);
      this.#topology.refreshTopology();
      // the same dead node: nothing to retry on until the topology moves
      const node = this.#topology.primaryFor(slot);
      if (!node || node === address) throw err;
      next = this.#connectionFor(slot);
    } else throw err;
    if (!next || performance.now() >= deadline) throw err;
    const connection = next;
    return connection.retry(args, argCount, deadline, asking).catch((again: unknown) => this.#recover(again, connection, slot, args, argCount, deadline, left - 1));
  }

  #connectionFor(slot: number): LimiterConnection | null {
    const node = this.#topology.primaryFor(slot);
    return node ? this.#connectionAt(node) : null;
  }

  #connectionAt(address: string | undefined): LimiterConnection | null {
    if (!address || this.#closed) return null;
    let connection = this.#connections.get(address);
    if (!connection) {
      const at = address.lastIndexOf(':');
      connection = new LimiterConnection({ ...this.#options, host: address.slice(0, at).replace(/^\[|\]$/g, ''), port: Number(address.slice(at + 1)) }, this.#script);
      this.#connections.set(address, connection);
    }
    return connection;
  }

  #keyOf(connection: LimiterConnection): string {
    for (const [address, c] of this.#connections) if (c === connection) return address;
    return '';
  }

  #drop(connection: LimiterConnection): void {
    const address = this.#keyOf(connection);
    if (!address) return;
    this.#connections.delete(address);
    connection.close();
  }

  #prune(): void {
    const primaries = this.#topology.primaries();
    // no primary known (a failover): keep what there is until one is
    if (primaries.length === 0) return;
    for (const [address, connection] of this.#connections) {
      if (primaries.includes(address)) continue;
      this.#connections.delete(address);
      connection.close();
    }
  }
}

function connectionError(message: string): Error {
  return Object.assign(new Error(message), { code: 'REDIS_CONNECTION' });
}
