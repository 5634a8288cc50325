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
//   asked to look again (after `-READONLY` on Sentinel its connection is made again, which asks the
//   sentinels, as ioredis does after a READONLY of its own), and the call fails (the failover limiter
//   answers it from this instance) unless another primary is named already. The limiter's connection
//   is dropped after `-READONLY` (a replica now) or a loss, kept after the others: that node answered.
// On Sentinel the primary the sentinels announce (+switch-master, sentinel-switch.ts) is used at once,
// for as long as the state connections use only it (ANNOUNCED_MS), not once ioredis's own connection is
// ready there (0.1–0.2 s later in a planned switchover).
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
  /** `address` answered -READONLY: it is a replica now (Sentinel: ioredis is made to ask the sentinels) */
  demoted?(address: string): void;
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
  /** the primary the sentinels announced ("host:port"), used for every slot until `#announcedUntil` */
  #announced: string | null = null;
  #announcedUntil = 0;
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

  /** the primary `slot`'s calls go to now ("host:port"), or null while there is none */
  nodeFor(slot: number): string | null {
    return this.#nodeFor(slot);
  }

  /**
   * The sentinels announced `address` as the primary, to be used for `forMs` whatever ioredis names;
   * null: a failover has begun, and ioredis's view (no primary until the next announcement) is used again.
   */
  announce(address: string | null, forMs: number): void {
    this.#announced = address;
    this.#announcedUntil = performance.now() + forMs;
  }

  close(): void {
    this.#closed = true;
    clearInterval(this.#timer);
    for (const connection of this.#connections.values()) connection.close();
    this.#connections.clear();
  }

  async #recover(err: unknown, failed: LimiterConnection, slot: number, args: string, argCount: number, deadline: number, left: number): Promise<Reply> {
    // a failure names its node: the failover limiter opens that server's breaker, and the stores know
    // whether a timeout was on the server they write to
    const failedAt = this.#keyOf(failed);
    if (failedAt !== '' && err !== null && typeof err === 'object') (err as { node?: string }).node ??= failedAt;
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
        const address = this.#keyOf(failed);
        // a replica now: the connection has no more use. A node that is -LOADING or -CLUSTERDOWN (a slot
        // nobody serves, or the whole cluster down meanwhile) answered: its connection carries the
        // calls for its other slots, in flight and to come, as before
        if (kind === 'READONLY') this.#drop(failed);
        if (kind === 'READONLY' && address !== '') {
          if (address === this.#announced) this.#announced = null;
          this.#topology.demoted?.(address);
        }
        this.#topology.refreshTopology();
        const node = this.#nodeFor(slot);
        if (!node || node === address) throw err;
        next = this.#connectionAt(node);
      } else throw err;
    } else if ((err as { code?: string }).code === 'REDIS_CONNECTION') {
      const address = this.#keyOf(failed);
      this.#drop(failed);
      this.#topology.refreshTopology();
      // the same dead node: nothing to retry on until the topology moves
      const node = this.#nodeFor(slot);
      if (!node || node === address) throw err;
      next = this.#connectionAt(node);
    } else throw err;
    if (!next || performance.now() >= deadline) throw err;
    const connection = next;
    return connection.retry(args, argCount, deadline, asking).catch((again: unknown) => this.#recover(again, connection, slot, args, argCount, deadline, left - 1));
  }

  /** the announced primary while it is in force */
  #announcedNow(): string | null {
    if (this.#announced !== null && performance.now() >= this.#announcedUntil) this.#announced = null;
    return this.#announced;
  }

  #nodeFor(slot: number): string | null {
    return this.#announcedNow() ?? this.#topology.primaryFor(slot);
  }

  #connectionFor(slot: number): LimiterConnection | null {
    const node = this.#nodeFor(slot);
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
    const announced = this.#announcedNow();
    const primaries = announced !== null ? [announced] : this.#topology.primaries();
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
