/**
 * One lock server (or one Redis Cluster, routed by key) behind a user's client: the engine it
 * runs, found by the first request, and every request of the contract in that engine's form,
 * each bounded by the per-request timeout. A request that waits runs on a connection of its
 * own from a small pool (`Pool`): on the module it is `ACQUIRE … BLOCK`, queued on the server;
 * on the Functions engine, attempts woken by the key's wake-up list (`BLPOP`).
 */
import { ConnectionFailure, ErrorReply, LossyInteger, UnexpectedReply, type Arg, type Backend, type DedicatedConnection, type Reply } from './connection.js';
import { LIBRARY, SCRIPT, request, requestAll, type Engine, type EngineChoice } from './engine.js';
import { BadReplyError, NoEngineError, ServerError, UnavailableError, isOutageCause, type Cause } from './errors.js';
import { ACQUIRE_ALL, BLOCK, COMMANDS, LABEL, LIBRARY_NAME, LIBRARY_VERSION, MAX_BLOCK_MS, MAX_PERMITS, PERMITS, SHARED, SHARED_PERMITS, VERSION_FUNCTION, wakeKey } from './protocol.js';
import { Pool } from './pool.js';

/** The `library_code` of the first library in a `FUNCTION LIST … WITHCODE` reply (a flat
 *  field/value list per library), `undefined` when there is none. */
export function libraryCode(reply: Reply): Buffer | undefined {
  const first = Array.isArray(reply) ? reply[0] : undefined;
  if (!Array.isArray(first)) return undefined;
  for (let i = 0; i + 1 < first.length; i += 2) {
    const name = first[i];
    const value = first[i + 1];
    if (Buffer.isBuffer(name) && name.toString() === 'library_code') return Buffer.isBuffer(value) ? value : undefined;
  }
  return undefined;
}

/** What an ACQUIRE asks for besides its key. */
export interface AcquireRequest {
  readonly key: string;
  /** 128 random bits as 32 hex digits: a text argument is one socket write for the clients. */
  readonly token: string;
  readonly ttlMs: number;
  readonly label?: Buffer | string | undefined;
  readonly permits?: number | undefined;
  /** A read lease of a read-write lock (`SHARED`; never with `permits` above 1). */
  readonly shared?: boolean | undefined;
}

/** One holder of a semaphore key, as `STATUS` shows it. */
export interface PermitStatus {
  readonly fence: bigint;
  readonly remainingMs: number;
  readonly label: Buffer | null;
}

/**
 * What `STATUS` says of a key: never a token. A mutex key (a write lease) shows as one permit;
 * a key held by read leases (`ReadWriteLock`) as `permits` 0 (`SHARED_PERMITS`), `shared`.
 */
export interface KeyStatus {
  readonly fence: bigint;
  /** How many holders the key admits at once; 0 for read leases (up to `MAX_PERMITS` readers). */
  readonly permits: number;
  /** Whether read leases hold the key (`permits` is 0). */
  readonly shared: boolean;
  /** The unexpired holders, oldest grant (lowest fence) first. */
  readonly holders: readonly PermitStatus[];
}

/** The request got no answer within its bound. */
class TimedOut extends ConnectionFailure {}

/** `promise`, or a `TimedOut` after `ms` (the request is not cancelled: its reply is ignored). */
export function bounded<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimedOut(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** The `Cause` of an error reply or a failed request (the Rust client's `Cause::of`). */
export function causeOf(err: unknown): Cause {
  if (err instanceof TimedOut) return 'TimedOut';
  if (!(err instanceof ErrorReply)) return 'Unreachable';
  const detail = err.line.slice(err.code.length + 1);
  switch (err.code) {
    case 'NOENGINE': return 'NoEngine';
    case 'NOPERM': return 'NoPermission';
    case 'NOAUTH': case 'WRONGPASS': return 'Credentials';
    case 'READONLY': return 'ReadOnly';
    case 'MOVED': case 'ASK': return 'Misrouted';
    case 'LOADING': case 'TRYAGAIN': case 'CLUSTERDOWN': case 'MASTERDOWN': return 'NotReady';
    case 'OOM': return 'OutOfMemory';
    case 'BUSY': return 'Busy';
    case 'NOREPLICAS': return 'NoReplicas';
    case 'ERR':
      if (detail.startsWith('unknown command') || detail.startsWith('unknown subcommand')) return 'NoModule';
      return 'Other';
    default: return 'Other';
  }
}

/** The load that cures `err`: the script after `NOSCRIPT`, the library after "Function not found". */
function lost(err: unknown): Arg[] | undefined {
  if (!(err instanceof ErrorReply)) return undefined;
  if (err.code === 'NOSCRIPT') return ['SCRIPT', 'LOAD', SCRIPT];
  if (err.line.startsWith('ERR Function not found')) return ['FUNCTION', 'LOAD', 'REPLACE', LIBRARY];
  return undefined;
}

/** Whether `err` is an answer of the server (the connection is in step). */
export function answered(err: unknown): boolean {
  return err instanceof ErrorReply;
}

/** Replaces every occurrence of `secret` in `text`: a server without the module echoes arguments. */
function redact(text: string, secret: string | undefined): string {
  const out = text.replace(/, with args beginning with: .*$/, ', with args beginning with: <redacted>');
  return secret ? out.split(secret).join('<token>') : out;
}

function asInteger(reply: Reply, what: string): bigint {
  if (typeof reply !== 'bigint') throw new BadReplyError(`${what} must reply an integer`);
  return reply;
}

function asFence(reply: Reply, what: string): bigint | null {
  if (reply === null) return null;
  const fence = asInteger(reply, what);
  if (fence < 1n) throw new BadReplyError(`${what} replied a fence below 1`);
  return fence;
}

/** Decodes a `STATUS` reply of either shape; `null` for a key without lock state. */
export function decodeStatus(reply: Reply): KeyStatus | null {
  if (reply === null) return null;
  if (!Array.isArray(reply) || reply.length < 3 || reply.length > 4) throw new BadReplyError('STATUS must reply an array of 3 or 4');
  const [f, second, third, fourth] = reply;
  const fence = asInteger(f ?? null, 'STATUS');
  const n = Number(asInteger(second ?? null, 'STATUS'));
  const m = asInteger(third ?? null, 'STATUS');
  if (Array.isArray(fourth)) {
    const holders = fourth.map((h) => {
      if (!Array.isArray(h) || h.length !== 3) throw new BadReplyError('a STATUS holder is [fence, pttl, label]');
      const label = h[2] ?? null;
      if (label !== null && !Buffer.isBuffer(label)) throw new BadReplyError('a STATUS label is a string');
      return { fence: asInteger(h[0] ?? null, 'STATUS'), remainingMs: Number(asInteger(h[1] ?? null, 'STATUS')), label };
    });
    const permits = Number(m);
    const shared = permits === SHARED_PERMITS;
    if (!shared && !(permits >= 1 && permits <= MAX_PERMITS)) throw new BadReplyError('STATUS permits must be 1 to MAX_PERMITS, or 0 for read leases');
    if (holders.length !== n || n > (shared ? MAX_PERMITS : permits)) throw new BadReplyError('STATUS holders disagree with its counts');
    return { fence, permits, shared, holders };
  }
  if (n === 0) {
    if (m !== -1n || fourth !== undefined) throw new BadReplyError('a free lock has pttl -1 and no label');
    return { fence, permits: 1, shared: false, holders: [] };
  }
  if (n !== 1 || m < 0n) throw new BadReplyError('held must be 0 or 1, with a pttl');
  const label = fourth ?? null;
  if (label !== null && !Buffer.isBuffer(label)) throw new BadReplyError('a STATUS label is a string');
  return { fence, permits: 1, shared: false, holders: [{ fence, remainingMs: Number(m), label }] };
}

/**
 * How long until a new holder fits by the leases' expiry alone: zero for a free key or a
 * semaphore with a free permit, else the time left on the lease that ends first (for readers:
 * the first a waiting writer is woken at, by its release or expiry).
 */
export function heldForMs(status: KeyStatus | null): number {
  if (!status || status.holders.length === 0 || (!status.shared && status.holders.length < status.permits)) return 0;
  return Math.min(...status.holders.map((h) => h.remainingMs));
}

/** The words after ACQUIRE's key (ACQUIREALL's keys): token, ttl, then the options asked for. */
function acquireTerms(req: Omit<AcquireRequest, 'key'>, blockMs?: number): Arg[] {
  const rest: Arg[] = [req.token, String(req.ttlMs)];
  if (blockMs !== undefined) rest.push(BLOCK, String(blockMs));
  if (req.label) rest.push(LABEL, req.label);
  if (req.permits !== undefined && req.permits > 1) rest.push(PERMITS, String(req.permits));
  if (req.shared) rest.push(SHARED);
  return rest;
}

/** The per-server options a locker applies. */
export interface ServerOptions {
  readonly timeoutMs: number;
  readonly maxBlocking: number;
  readonly engine: EngineChoice;
}

/** A wait's outcome on one server: the fence, or null when the wait ran out first. */
export type WaitAnswer = bigint | null;

/** One lock server. */
export class Server {
  #engine: Promise<Engine> | undefined;
  #found: Engine | undefined;
  /** Whether the module here serves `ACQUIREALL`, asked by the first `acquireAll` on the module. */
  #acquireAll: Promise<boolean> | undefined;
  readonly pool: Pool<DedicatedConnection>;

  constructor(readonly backend: Backend, readonly options: ServerOptions) {
    this.pool = new Pool(options.maxBlocking, (conn) => conn.close());
  }

  get name(): string {
    return this.backend.name;
  }

  /** The engine once a request found it out. */
  get engine(): Engine | undefined {
    return this.#found;
  }

  /** Turns a failed request into this package's error, naming this server; `secret` never shows. */
  error(err: unknown, secret?: string): Error {
    if (err instanceof ServerError || err instanceof BadReplyError) return err;
    if (err instanceof LossyInteger || err instanceof UnexpectedReply) return new BadReplyError(`${this.name}: ${err.message}`, { cause: err });
    const cause = causeOf(err);
    const text = redact(err instanceof Error ? err.message : String(err), secret);
    const code = err instanceof ErrorReply ? err.code : undefined;
    if (cause === 'NoEngine') return new NoEngineError(this.name, cause, text, code);
    const Kind = isOutageCause(cause) && !(code === 'TRYAGAIN' && text.includes('wait interrupted')) ? UnavailableError : ServerError;
    return new Kind(this.name, cause, text, code, { cause: err });
  }

  /**
   * One command on the shared connection, within the timeout. A script the server lost (a
   * restart, a failover, `SCRIPT FLUSH`) or a library a primary lacks (a cluster's new node)
   * is loaded again, and the command sent once more.
   */
  async call(args: readonly Arg[], key?: string): Promise<Reply> {
    const conn = this.backend.shared();
    try {
      return await bounded(conn.call(args, key), this.options.timeoutMs);
    } catch (err) {
      const reload = lost(err);
      if (!reload) throw err;
      await bounded(this.backend.everywhere(reload), this.options.timeoutMs);
      return bounded(conn.call(args, key), this.options.timeoutMs);
    }
  }

  /** The engine this server serves leases with, asking the server on the first call. */
  detect(): Promise<Engine> {
    if (this.#found && this.#engine) return this.#engine;
    if (!this.#engine) {
      this.#engine = this.#detect().then(
        (engine) => ((this.#found = engine), engine),
        (err: unknown) => {
          this.#engine = undefined;
          throw this.error(err);
        },
      );
    }
    return this.#engine;
  }

  async #detect(): Promise<Engine> {
    const choice = this.options.engine;
    if (choice === 'module') return 'module';
    if (choice === 'script') {
      await this.#loadScript();
      return 'script';
    }
    if (choice === 'auto') {
      let module: boolean;
      try {
        const info = await this.call(['COMMAND', 'INFO', COMMANDS.acquire]);
        module = Array.isArray(info) && info.some((entry) => entry !== null);
      } catch (err) {
        // A server that hides COMMAND runs the module unless it has the library.
        if (!answered(err)) throw err;
        module = (await this.#libraryVersion()) === undefined;
      }
      if (module) return 'module';
    }
    try {
      await this.#loadLibrary();
      return 'functions';
    } catch (err) {
      if (!answered(err) || choice !== 'auto') throw this.#noEngine(err);
    }
    try {
      await this.#loadScript();
      return 'script';
    } catch (err) {
      throw this.#noEngine(err);
    }
  }

  #noEngine(refusal: unknown): unknown {
    if (!answered(refusal)) return refusal;
    const why = refusal instanceof Error ? refusal.message : String(refusal);
    return new ErrorReply(
      `NOENGINE the fencedlock module is not loaded and the Functions library could not be loaded (${why}); load the module ` +
        '(--loadmodule …/libfencedlock_module.so), or have an administrator load the Functions library ' +
        '(this package carries it: redis-cli -x FUNCTION LOAD REPLACE < node_modules/fencedlock/functions.lua), ' +
        'or allow this user FUNCTION LOAD or SCRIPT LOAD and EVALSHA',
    );
  }

  /** The server's library version, undefined when it has none. Asked without `call`'s reload:
   *  that would load the library to answer, so a module server that hides COMMAND would look
   *  like one with the library (and get it loaded beside the module). */
  async #libraryVersion(): Promise<number | undefined> {
    try {
      const reply = await bounded(this.backend.shared().call(['FCALL_RO', VERSION_FUNCTION, '0']), this.options.timeoutMs);
      return Number(asInteger(reply, VERSION_FUNCTION));
    } catch (err) {
      if (answered(err)) return undefined;
      throw err;
    }
  }

  /** Loads this package's library unless the server has it or a newer one. A library of this
   *  version whose code differs (changed without a version raise) is replaced too. */
  async #loadLibrary(): Promise<void> {
    const version = await this.#libraryVersion();
    if (version !== undefined && version > LIBRARY_VERSION) return;
    if (version === LIBRARY_VERSION && !(await this.#libraryDiffers())) return;
    await bounded(this.backend.everywhere(['FUNCTION', 'LOAD', 'REPLACE', LIBRARY]), this.options.timeoutMs);
  }

  /** Whether the server's library code is other than this package's (`FUNCTION LIST …
   *  WITHCODE`); false when the server will not say (an ACL that denies `FUNCTION LIST`). */
  async #libraryDiffers(): Promise<boolean> {
    try {
      const code = libraryCode(await this.call(['FUNCTION', 'LIST', 'LIBRARYNAME', LIBRARY_NAME, 'WITHCODE']));
      return code === undefined || !code.equals(Buffer.from(LIBRARY));
    } catch (err) {
      if (answered(err)) return false;
      throw err;
    }
  }

  async #loadScript(): Promise<void> {
    await bounded(this.backend.everywhere(['SCRIPT', 'LOAD', SCRIPT]), this.options.timeoutMs);
  }

  #acquireWords(engine: Engine, req: AcquireRequest, waiting: boolean, blockMs?: number): Arg[] {
    return request(engine, 'acquire', req.key, acquireTerms(req, blockMs), waiting);
  }

  /** One ACQUIRE attempt on the shared connection: the fence, or null while held elsewhere. */
  async acquire(req: AcquireRequest): Promise<bigint | null> {
    const engine = this.#found ?? (await this.detect());
    try {
      return asFence(await this.call(this.#acquireWords(engine, req, false), req.key), 'ACQUIRE');
    } catch (err) {
      throw this.error(err, req.token);
    }
  }

  /**
   * Whether this server takes a set of keys in one `ACQUIREALL` (`oneSlot`: whether the keys
   * are all of one cluster slot). The Functions library does (`fencedlock_acquireall`, in the
   * library this package loads where the server's is older, or a newer one) for keys of one
   * slot, which its floor key requires on any server; the script form likewise. The module
   * does where it knows the command (`COMMAND INFO`; modules older than it do not; a server
   * that hides `COMMAND` is not asked to), for keys of one slot on a Redis Cluster. The module
   * is asked once, after the engine is known and before any `ACQUIREALL` is sent: a server
   * that does not know the command would echo its arguments, the token among them, in its
   * error. A question that got no answer is asked again next time.
   */
  async servesAcquireAll(oneSlot: boolean): Promise<boolean> {
    const engine = this.#found ?? (await this.detect());
    if (engine !== 'module') return oneSlot;
    if (this.backend.isCluster && !oneSlot) return false;
    if (!this.#acquireAll) {
      this.#acquireAll = this.#servesAcquireAll().catch((err: unknown) => {
        this.#acquireAll = undefined;
        throw this.error(err);
      });
    }
    return this.#acquireAll;
  }

  async #servesAcquireAll(): Promise<boolean> {
    try {
      const info = await this.call(['COMMAND', 'INFO', ACQUIRE_ALL]);
      return Array.isArray(info) && info.some((entry) => entry !== null);
    } catch (err) {
      if (answered(err)) return false;
      throw err;
    }
  }

  /**
   * One `ACQUIREALL` for `keys` in the engine's form (only where `servesAcquireAll()` said
   * yes: on the library, keys of one slot; on the module, keys of one slot on a cluster): a
   * fence per key, in the order named, or null when the server refused the set (then no key
   * changed). Never waits. A script or library the server lost is loaded again (`call`).
   */
  async acquireAll(keys: readonly string[], req: Omit<AcquireRequest, 'key'>): Promise<bigint[] | null> {
    try {
      const engine = this.#found ?? (await this.detect());
      const reply = await this.call(requestAll(engine, keys, acquireTerms(req)), keys[0]);
      if (reply === null) return null;
      if (!Array.isArray(reply) || reply.length !== keys.length) throw new BadReplyError(`${this.name}: ACQUIREALL must reply one fence per key, or nil`);
      return reply.map((item) => {
        const fence = asFence(item, 'ACQUIREALL');
        if (fence === null) throw new BadReplyError(`${this.name}: ACQUIREALL replied nil for a key of a granted set`);
        return fence;
      });
    } catch (err) {
      throw this.error(err, req.token);
    }
  }

  async renew(key: string, token: string, ttlMs: number): Promise<boolean> {
    const engine = this.#found ?? (await this.detect());
    try {
      return asInteger(await this.call(request(engine, 'renew', key, [token, String(ttlMs)]), key), 'RENEW') === 1n;
    } catch (err) {
      throw this.error(err, token);
    }
  }

  async release(key: string, token: string): Promise<boolean> {
    const engine = this.#found ?? (await this.detect());
    try {
      return asInteger(await this.call(request(engine, 'release', key, [token]), key), 'RELEASE') === 1n;
    } catch (err) {
      throw this.error(err, token);
    }
  }

  async raise(key: string, token: string, fence: bigint): Promise<bigint | null> {
    const engine = await this.detect();
    try {
      return asFence(await this.call(request(engine, 'raise', key, [token, fence.toString()]), key), 'RAISE');
    } catch (err) {
      throw this.error(err, token);
    }
  }

  async status(key: string): Promise<KeyStatus | null> {
    const engine = await this.detect();
    try {
      return decodeStatus(await this.call(request(engine, 'status', key, []), key));
    } catch (err) {
      throw this.error(err);
    }
  }

  async ping(): Promise<void> {
    await this.call(['PING']);
  }

  /**
   * An ACQUIRE that waits until `until` (`performance.now()` ms) at most, on a connection of
   * the pool: the fence, or null when the wait ran out. `signal` abandons it (closing the
   * connection, so the server forgets the waiter). Throws the server's refusal, or a failure
   * after which the server may have granted (the caller releases then).
   */
  async acquireWaiting(req: AcquireRequest, until: number, signal?: AbortSignal): Promise<WaitAnswer> {
    const engine = await this.detect();
    const checkout = await this.pool.checkOut(until, signal);
    if (!checkout) return null;
    let conn: DedicatedConnection | undefined;
    let inStep = false;
    try {
      conn = checkout.idle ?? (await bounded(this.backend.dedicated(), this.options.timeoutMs));
      const answer = engine === 'module' ? await this.#blocked(conn, engine, req, until, signal) : await this.#woken(conn, engine, req, until, signal);
      inStep = true;
      return answer;
    } catch (err) {
      inStep = answered(err);
      throw this.error(err, req.token);
    } finally {
      checkout.done(inStep ? conn : undefined);
      if (!inStep) conn?.close();
    }
  }

  /** `request` on `conn` until it answers, `ms` passes or `signal` aborts. */
  async #on(conn: DedicatedConnection, args: readonly Arg[], key: string, ms: number, signal?: AbortSignal): Promise<Reply> {
    if (signal?.aborted) throw new TimedOut('abandoned');
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => reject(new TimedOut('abandoned'));
      signal?.addEventListener('abort', onAbort, { once: true });
    });
    try {
      return await Promise.race([bounded(conn.call(args, key), ms), aborted]);
    } finally {
      if (onAbort) signal?.removeEventListener('abort', onAbort);
    }
  }

  async #blocked(conn: DedicatedConnection, engine: Engine, req: AcquireRequest, until: number, signal?: AbortSignal): Promise<WaitAnswer> {
    const left = Math.max(0, until - performance.now());
    // BLOCK 0 would wait without limit: a wait with nothing left is one attempt of 1 ms.
    const blockMs = Math.min(MAX_BLOCK_MS, Math.max(1, Math.ceil(left)));
    const words = this.#acquireWords(engine, req, false, blockMs);
    return asFence(await this.#on(conn, words, req.key, blockMs + this.options.timeoutMs, signal), 'ACQUIRE');
  }

  /**
   * Waiting where the server cannot block (the Functions engine): attempts, each refused one
   * followed by a `BLPOP` on the key's wake-up list for as long as `STATUS` shows the holders'
   * leases to last (`client/src/node/wake.rs`).
   */
  async #woken(conn: DedicatedConnection, engine: Engine, req: AcquireRequest, until: number, signal?: AbortSignal): Promise<WaitAnswer> {
    const timeout = this.options.timeoutMs;
    const attempt = this.#acquireWords(engine, req, false);
    const registering = this.#acquireWords(engine, req, true);
    const status = request(engine, 'status', req.key, []);
    const send = async (args: readonly Arg[], ms = timeout): Promise<Reply> => {
      try {
        return await this.#on(conn, args, req.key, ms, signal);
      } catch (err) {
        const reload = lost(err);
        if (!reload) throw err;
        await bounded(this.backend.everywhere(reload), timeout);
        return this.#on(conn, args, req.key, ms, signal);
      }
    };
    let fence = asFence(await send(attempt), 'ACQUIRE');
    for (;;) {
      if (fence !== null) return fence;
      const left = until - performance.now();
      if (left <= 0) return null;
      let heldFor = 0;
      try {
        heldFor = heldForMs(decodeStatus(await send(status)));
      } catch (err) {
        if (!(err instanceof BadReplyError)) throw err;
      }
      fence = asFence(await send(registering), 'ACQUIRE');
      if (fence !== null) return fence;
      const nap = Math.min(Math.max(heldFor + 1, 5), left);
      const napMs = Math.max(1, Math.ceil(nap));
      const seconds = `${Math.floor(napMs / 1000)}.${String(napMs % 1000).padStart(3, '0')}`;
      await send(['BLPOP', wakeKey(req.key), seconds], napMs + timeout);
      // The attempt after a wake-up names the wake-up list too: a reader granted then passes
      // the wake-up on to the readers waiting behind it (a release wakes one).
      fence = asFence(await send(registering), 'ACQUIRE');
    }
  }
}

export { TimedOut };
