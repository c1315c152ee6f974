/**
 * The node-redis adapter (v5 and later: `createClient`, `createCluster`).
 *
 * Every request goes through the user's own client with a per-command type mapping that
 * reads integers as decimal text (so fences above 2^53 are exact) and strings as bytes; the
 * client's own settings are untouched. node-redis v4 has no type mapping and parses integers
 * as lossy JS numbers, so it is refused.
 */
import { ConnectionFailure, ErrorReply, SUPPORTED_CLIENTS, UnexpectedReply, clientFault, dedicatedConnection, exactInteger, flatMap, type Arg, type Backend, type Connection, type DedicatedConnection, type Reply, type Wire } from './connection.js';
import { InvalidArgumentError } from './errors.js';

/** RESP type bytes (node-redis's `RESP_TYPES`): ':' integer, '$' bulk, '+' simple string, '(' big number. */
const TYPE_MAPPING = { 58: String, 36: Buffer, 43: Buffer, 40: String } as const;

/** The part of a node-redis client or cluster this adapter uses. */
export interface NodeRedisLike {
  sendCommand(...args: unknown[]): Promise<unknown>;
  duplicate(overrides?: Record<string, unknown>): NodeRedisLike;
  connect(): Promise<unknown>;
  destroy?(): void;
  disconnect?(): Promise<void>;
  withTypeMapping?: unknown;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  readonly isOpen: boolean;
  readonly options?: Record<string, unknown>;
  readonly masters?: unknown[];
  nodeClient?(node: unknown): Promise<NodeRedisLike>;
  readonly slots?: unknown;
}

/** Whether `client` looks like a node-redis client or cluster. */
export function isNodeRedis(client: unknown): client is NodeRedisLike {
  const c = client as Partial<NodeRedisLike> | null;
  return typeof c === 'object' && c !== null && typeof c.sendCommand === 'function' && typeof c.duplicate === 'function' && 'isOpen' in c;
}

function normalise(value: unknown): Reply {
  if (value === null || value === undefined) return null;
  if (Buffer.isBuffer(value)) return value;
  if (typeof value === 'string' || typeof value === 'number') return exactInteger(value);
  if (typeof value === 'bigint') return value;
  if (Array.isArray(value)) return value.map(normalise);
  if (typeof value === 'boolean') return BigInt(value);
  if (typeof value === 'object') {
    const flat = flatMap(value, normalise);
    if (flat) return flat;
  }
  throw new UnexpectedReply(`node-redis handed back a reply of type ${describe(value)}, which this package does not read`);
}

function describe(value: unknown): string {
  if (typeof value !== 'object' || value === null) return typeof value;
  return (value as { constructor?: { name?: string } }).constructor?.name ?? 'object';
}

/** Whether `err` is node-redis's `ErrorReply` (or a subclass, e.g. `SimpleError`): the server answered. */
function isReply(err: unknown): err is Error {
  for (let proto: unknown = err; proto; proto = Object.getPrototypeOf(proto)) {
    if ((proto as { constructor?: { name?: string } }).constructor?.name === 'ErrorReply') return true;
  }
  return false;
}

function failure(err: unknown): Error {
  if (isReply(err)) return new ErrorReply(err.message);
  return err instanceof Error ? clientFault(err) : new ConnectionFailure(String(err));
}

function isCluster(client: NodeRedisLike): boolean {
  return 'masters' in client && 'slots' in client;
}

/** Every command's options: one object, as node-redis only reads what it is given. */
const COMMAND_OPTIONS = { typeMapping: TYPE_MAPPING };

function sent(client: NodeRedisLike, cluster: boolean, args: readonly Arg[], key: string | undefined): Promise<unknown> {
  return cluster ? client.sendCommand(key, false, args, COMMAND_OPTIONS) : client.sendCommand(args, COMMAND_OPTIONS);
}

async function send(client: NodeRedisLike, cluster: boolean, args: readonly Arg[], key: string | undefined): Promise<Reply> {
  let reply: unknown;
  try {
    reply = await sent(client, cluster, args, key);
  } catch (err) {
    throw failure(err);
  }
  return normalise(reply);
}

function addressOf(client: NodeRedisLike, cluster: boolean): string {
  const options = client.options ?? {};
  if (cluster) {
    const roots = (options['rootNodes'] as { url?: string; socket?: { host?: string; port?: number } }[] | undefined) ?? [];
    return `cluster(${roots.map((r) => r.url ?? `${r.socket?.host ?? '127.0.0.1'}:${r.socket?.port ?? 6379}`).join(',')})`;
  }
  const socket = (options['socket'] as { host?: string; port?: number; path?: string } | undefined) ?? {};
  if (socket.path) return socket.path;
  const url = options['url'] as string | undefined;
  if (url && !socket.host) {
    const parsed = new URL(url);
    return `${parsed.hostname}:${parsed.port || '6379'}`;
  }
  return `${socket.host ?? 'localhost'}:${socket.port ?? 6379}`;
}

/** The adapter over a node-redis client or cluster. */
export class NodeRedisBackend implements Backend {
  readonly name: string;
  readonly isCluster: boolean;
  readonly #opened = new Set<NodeRedisLike>();
  #closed = false;

  constructor(readonly client: NodeRedisLike) {
    if (client.withTypeMapping === undefined) {
      throw new InvalidArgumentError(`this node-redis is older than v5: it parses integer replies as lossy JS numbers (fences exceed 2^53) and has no per-command type mapping; supported: ${SUPPORTED_CLIENTS}`);
    }
    this.isCluster = isCluster(client);
    this.name = addressOf(client, this.isCluster);
  }

  /** The shared connection: the user's client itself, made once. */
  readonly #shared: Connection = { call: (args, key) => send(this.client, this.isCluster, args, key) };

  shared(): Connection {
    return this.#shared;
  }

  readonly #wire: Wire = { send: (args, key) => sent(this.client, this.isCluster, args, key), read: normalise, failure };

  wire(): Wire {
    return this.#wire;
  }

  async everywhere(args: readonly Arg[]): Promise<void> {
    const masters = this.isCluster ? this.client.masters ?? [] : [];
    if (masters.length === 0 || typeof this.client.nodeClient !== 'function') {
      await this.shared().call(args);
      return;
    }
    await Promise.all(
      masters.map(async (master) => {
        const node = await (this.client.nodeClient as (n: unknown) => Promise<NodeRedisLike>)(master);
        await send(node, false, args, undefined);
      }),
    );
  }

  async dedicated(): Promise<DedicatedConnection> {
    if (this.#closed) throw new ConnectionFailure('the locker is closed');
    // No reconnects: a blocked request's connection that breaks is done.
    const conn = this.isCluster ? this.client.duplicate() : this.client.duplicate({ disableOfflineQueue: true, socket: { ...((this.client.options?.['socket'] as object | undefined) ?? {}), reconnectStrategy: false } });
    return dedicatedConnection(conn, this.#opened, destroy, failure, (args, key) => send(conn, this.isCluster, args, key));
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const conn of this.#opened) destroy(conn);
    this.#opened.clear();
  }
}

function destroy(conn: NodeRedisLike): void {
  try {
    if (typeof conn.destroy === 'function') conn.destroy();
    else void conn.disconnect?.().catch(() => {});
  } catch {
    // already closed
  }
}
