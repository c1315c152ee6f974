/**
 * What the lock code needs of a Redis client, whichever the user has: one command at a time,
 * replies normalised so that an integer is always an exact `bigint`, and connections of
 * their own for requests that block. `ioredis.ts` and `node-redis.ts` are the two adapters.
 */

/** The client libraries (and versions) this package works over: `peerDependencies` says the same. */
export const SUPPORTED_CLIENTS = 'ioredis 5.3 or later 5.x, or 6.x; node-redis (the `redis` package) 5.x or 6.x';

/**
 * `err`, thrown by the client library itself, as what it means here: a programming error of
 * the library (a `TypeError`, say, from an API it changed) is a breach of what this package
 * expects of it, never an outage.
 */
export function clientFault(err: Error): Error {
  if (err instanceof TypeError || err instanceof RangeError || err instanceof ReferenceError || err instanceof SyntaxError) {
    return new UnexpectedReply(`the client library failed (${err.name}: ${err.message}); supported: ${SUPPORTED_CLIENTS}`);
  }
  return err;
}

/** A command's words: the name and arguments, as text or bytes. */
export type Arg = string | Buffer;

/** A reply: nil, an exact integer, bytes (bulk or simple strings), or an array of replies. */
export type Reply = null | bigint | Buffer | Reply[];

/** An error reply of the server (`-CODE detail`): the server answered, the connection is in step. */
export class ErrorReply extends Error {
  override name = 'ErrorReply';
  /** The first word (`ERR`, `NOPERM`, `WRONGTYPE`, ...). */
  readonly code: string;
  constructor(readonly line: string) {
    super(line);
    const space = line.indexOf(' ');
    this.code = space < 0 ? line : line.slice(0, space);
  }
}

/** The request got no reply: the connection failed, or the client gave up on it. */
export class ConnectionFailure extends Error {
  override name = 'ConnectionFailure';
}

/** One way to send commands to a server (or a cluster, routed by `key`). */
export interface Connection {
  /**
   * Sends `args` and resolves with the normalised reply; rejects with `ErrorReply` for an
   * error reply and `ConnectionFailure` (or the client's own error) otherwise. `key` is the
   * command's one key, for a cluster's routing.
   */
  call(args: readonly Arg[], key?: string): Promise<Reply>;
}

/**
 * The shared connection as the lease path drives it: the client library's own promise of the
 * raw reply, read and classified by the caller (`Server`), so that a request is one promise
 * chained on the client's instead of an async function per layer (issue #44).
 */
export interface Wire {
  /** Sends `args` (routed by `key` on a cluster): the client's promise of the raw reply. May throw. */
  send(args: readonly Arg[], key: string | undefined): Promise<unknown>;
  /** A raw reply as a `Reply` (throws for a reply this package does not read). */
  read(value: unknown): Reply;
  /** What a rejection of `send` means here: `ErrorReply`, `ConnectionFailure`, ... */
  failure(err: unknown): Error;
}

/** A connection that carries one blocking request at a time and is closed when abandoned. */
export interface DedicatedConnection extends Connection {
  /** Closes the connection: the server forgets a request blocked on it. */
  close(): void;
}

/** What {@link dedicatedConnection} needs of a client's connection. */
export interface Connectable {
  on(event: 'error', listener: () => void): unknown;
  connect(): Promise<unknown>;
}

/**
 * `conn`, connected, as a dedicated connection that sends with `call`: tracked in `opened`
 * until it is closed (so the adapter's `close` ends it too) and ended with `end`. A connection
 * that cannot connect is ended at once and its error, made by `failure`, thrown. Its error
 * events are the requests' to report: a listener keeps them from crashing the process.
 */
export async function dedicatedConnection<C extends Connectable>(
  conn: C,
  opened: Set<C>,
  end: (conn: C) => void,
  failure: (err: unknown) => Error,
  call: Connection['call'],
): Promise<DedicatedConnection> {
  conn.on('error', () => {});
  opened.add(conn);
  try {
    await conn.connect();
  } catch (err) {
    opened.delete(conn);
    end(conn);
    throw failure(err);
  }
  return {
    call,
    close: () => {
      opened.delete(conn);
      end(conn);
    },
  };
}

/** A user's client, adapted. */
export interface Backend {
  /** The server's address (or the cluster's seeds), for errors and Redlock's ranking. */
  readonly name: string;
  /** Whether this is a Redis Cluster. */
  readonly isCluster: boolean;
  /** The connection that carries every non-blocking request. */
  shared(): Connection;
  /** The same connection, for the lease path (`Server`'s requests). */
  wire(): Wire;
  /**
   * Sends `args` (a keyless command: loading the library or the script) to the server, or to
   * every primary of a cluster, where a routed request would reach one random node.
   */
  everywhere(args: readonly Arg[]): Promise<void>;
  /** A new connection for blocking requests, owned by the caller. */
  dedicated(): Promise<DedicatedConnection>;
  /** Closes the connections this adapter opened itself (never the user's client). */
  close(): Promise<void>;
}

/** An integer reply that arrived as a lossy JS number: a contract breach on this side, never an outage. */
export class LossyInteger extends Error {
  override name = 'LossyInteger';
}

/**
 * A reply of a shape this package does not read (a client library that changed what it hands
 * back): a contract breach on this side, never an outage. The server answered.
 */
export class UnexpectedReply extends Error {
  override name = 'UnexpectedReply';
}

/**
 * A map reply (RESP3 maps, or the plain objects and `Map`s a client library makes of some
 * replies: node-redis 6 does so for `COMMAND INFO`'s key specs) as the flat field, value list
 * RESP2 gives, so the lock code reads one shape whatever the client hands back.
 */
export function flatMap(value: object, normalise: (v: unknown) => Reply): Reply[] | undefined {
  if (value instanceof Map) return [...value.entries()].flatMap(([k, v]) => [normalise(typeof k === 'string' ? Buffer.from(k) : k), normalise(v)]);
  if (value instanceof Set) return [...value].map(normalise);
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return undefined;
  return Object.entries(value).flatMap(([k, v]) => [Buffer.from(k), normalise(v)]);
}

/** The exact integer of an integer reply that arrived as text or as a safe JS number. */
export function exactInteger(value: string | number): bigint {
  // A release's and a renewal's reply, without parsing (BigInt of a string is the slow path).
  if (value === '1') return 1n;
  if (value === '0') return 0n;
  if (typeof value === 'string') return BigInt(value);
  if (!Number.isSafeInteger(value)) {
    // A lossy number would be a wrong fence: never hand it out.
    throw new LossyInteger(`an integer reply above 2^53 arrived as a JS number (${value}); it cannot be exact`);
  }
  return BigInt(value);
}
