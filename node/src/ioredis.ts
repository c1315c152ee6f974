/**
 * The ioredis adapter (`Redis` and `Cluster`).
 *
 * ioredis parses integer replies as JS numbers unless the connection was made with
 * `stringNumbers: true`, and that is a setting of the connection's parser, not of a command:
 * there is no per-command way to read an integer exactly. Fences exceed 2^53 on the module
 * after an epoch starts, so on a client made without `stringNumbers` the locker sends its
 * requests on one connection of its own, `client.duplicate({ stringNumbers: true })`, opened
 * at the first request and closed by `locker.close()`. A client made with `stringNumbers:
 * true` is used as it is (unless it has a `keyPrefix`: the locker's keys are sent as given,
 * and a prefix would reach the Functions library's key arguments but not the module's).
 */
import { ConnectionFailure, ErrorReply, SUPPORTED_CLIENTS, UnexpectedReply, clientFault, dedicatedConnection, exactInteger, flatMap, type Arg, type Backend, type Connection, type DedicatedConnection, type Reply, type Wire } from './connection.js';
import { InvalidArgumentError } from './errors.js';

/** The part of an ioredis `Redis` or `Cluster` this adapter uses. */
export interface IORedisLike {
  callBuffer(command: string, ...args: Arg[]): Promise<unknown>;
  duplicate(...args: unknown[]): IORedisLike;
  disconnect(): void;
  nodes?(role: 'master'): IORedisLike[];
  connect(): Promise<void>;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  readonly options: Record<string, unknown>;
  readonly isCluster?: boolean;
  readonly startupNodes?: unknown[];
  readonly status: string;
}

/** Whether `client` looks like an ioredis client. */
export function isIORedis(client: unknown): client is IORedisLike {
  const c = client as Partial<IORedisLike> | null;
  return typeof c === 'object' && c !== null && typeof c.callBuffer === 'function' && typeof c.duplicate === 'function' && typeof c.options === 'object';
}

function normalise(value: unknown): Reply {
  if (value === null || value === undefined) return null;
  if (Buffer.isBuffer(value)) return value;
  if (typeof value === 'string' || typeof value === 'number') return exactInteger(value);
  if (Array.isArray(value)) return value.map(normalise);
  if (value instanceof Error) throw value;
  if (typeof value === 'bigint') return value;
  if (typeof value === 'object') {
    const flat = flatMap(value, normalise);
    if (flat) return flat;
  }
  throw new UnexpectedReply(`ioredis handed back a reply of type ${typeof value}, which this package does not read`);
}

function failure(err: unknown): Error {
  if (err instanceof Error && err.name === 'ReplyError') return new ErrorReply(err.message);
  return err instanceof Error ? clientFault(err) : new ConnectionFailure(String(err));
}

/** `args` (the command's name first, always text) sent as they are, not copied apart first. */
function sent(client: IORedisLike, args: readonly Arg[]): Promise<unknown> {
  return client.callBuffer(...(args as readonly [string, ...Arg[]]));
}

async function send(client: IORedisLike, args: readonly Arg[]): Promise<Reply> {
  let reply: unknown;
  try {
    reply = await sent(client, args);
  } catch (err) {
    throw failure(err);
  }
  return normalise(reply);
}

function wireOf(client: IORedisLike): Wire {
  return { send: (args) => sent(client, args), read: normalise, failure };
}

/** Whether the client itself reads integers exactly and sends keys as given. */
function usableAsIs(client: IORedisLike): boolean {
  const options = client.isCluster ? (client.options['redisOptions'] as Record<string, unknown> | undefined) ?? {} : client.options;
  return options['stringNumbers'] === true && !options['keyPrefix'];
}

function exactCopy(client: IORedisLike, extra: Record<string, unknown>): IORedisLike {
  if (client.isCluster) {
    const redisOptions = { ...((client.options['redisOptions'] as object | undefined) ?? {}), stringNumbers: true, keyPrefix: '' };
    return client.duplicate([], { ...extra, redisOptions });
  }
  return client.duplicate({ ...extra, stringNumbers: true, keyPrefix: '' });
}

function addressOf(client: IORedisLike): string {
  if (client.isCluster) {
    const nodes = (client.startupNodes ?? []).map((n) => (typeof n === 'object' && n !== null ? `${(n as { host?: string }).host ?? '127.0.0.1'}:${(n as { port?: number }).port ?? 6379}` : String(n)));
    return `cluster(${nodes.join(',')})`;
  }
  const host = (client.options['host'] as string | undefined) ?? '127.0.0.1';
  const path = client.options['path'] as string | undefined;
  return path ?? `${host}:${String(client.options['port'] ?? 6379)}`;
}

/** What a closed locker's own connection answers: nothing more is opened after `close()`. */
const CLOSED: Connection = { call: () => Promise.reject(new ConnectionFailure('the locker is closed')) };
const CLOSED_WIRE: Wire = { send: () => Promise.reject(new ConnectionFailure('the locker is closed')), read: normalise, failure };

/** The adapter over an ioredis client. */
export class IORedisBackend implements Backend {
  readonly name: string;
  readonly isCluster: boolean;
  #own: IORedisLike | undefined;
  /** What `shared()` returns, made at its first call (a request's), until `close()`. */
  #shared: Connection | undefined;
  /** What `wire()` returns, likewise. */
  #wire: Wire | undefined;
  #closed = false;
  readonly #opened = new Set<IORedisLike>();

  constructor(readonly client: IORedisLike) {
    // ioredis 5 rewrote the client: its `Redis` and `Cluster` say `isCluster`, and neither
    // keeps 4.x's `_addedScriptHashes`. 4.x is not tested: refused before anything is sent.
    if (!('isCluster' in client) || '_addedScriptHashes' in client) throw new InvalidArgumentError(`this ioredis is older than v5; supported: ${SUPPORTED_CLIENTS}`);
    this.name = addressOf(client);
    this.isCluster = client.isCluster === true;
  }

  shared(): Connection {
    if (this.#shared) return this.#shared;
    if (this.#closed && !usableAsIs(this.client)) return CLOSED;
    const conn = this.#connection();
    return (this.#shared = { call: (args) => send(conn, args) });
  }

  wire(): Wire {
    if (this.#wire) return this.#wire;
    if (this.#closed && !usableAsIs(this.client)) return CLOSED_WIRE;
    return (this.#wire = wireOf(this.#connection()));
  }

  /** The client itself where it reads integers exactly, else the locker's own copy of it (opened once). */
  #connection(): IORedisLike {
    if (usableAsIs(this.client)) return this.client;
    if (!this.#own) {
      this.#own = exactCopy(this.client, {});
      this.#own.on('error', () => {}); // reported per request
      this.#opened.add(this.#own);
    }
    return this.#own;
  }

  async everywhere(args: readonly Arg[]): Promise<void> {
    const conn = usableAsIs(this.client) ? this.client : this.#own;
    const primaries = this.isCluster ? (conn ?? this.client).nodes?.('master') ?? [] : [];
    if (primaries.length === 0) {
      await this.shared().call(args);
      return;
    }
    await Promise.all(primaries.map((node) => send(node, args)));
  }

  async dedicated(): Promise<DedicatedConnection> {
    if (this.#closed) throw new ConnectionFailure('the locker is closed');
    // No retries and no offline queue: a request on a broken connection fails at once.
    const conn = exactCopy(this.client, { lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null });
    return dedicatedConnection(conn, this.#opened, (c) => c.disconnect(), failure, (args) => send(conn, args));
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const conn of this.#opened) conn.disconnect();
    this.#opened.clear();
    this.#own = undefined;
    this.#shared = undefined;
    this.#wire = undefined;
  }
}
