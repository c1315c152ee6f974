/**
 * One lock server (or one Redis Cluster, routed by key) behind a user's client: the engine it
 * runs, found by the first request (`detection.ts`), and every request of the contract in that
 * engine's form (`acquire-request.ts`, `engine.ts`), each bounded by the per-request timeout,
 * its replies decoded (`replies.ts`) and its failures classified (`failures.ts`). A request
 * that waits runs on a connection of its own from a small pool (`Pool`; `waiting.ts`).
 */
import { acquireAllWords, acquireWords, type AcquireRequest } from './acquire-request.js';
import type { Arg, Backend, DedicatedConnection, Reply } from './connection.js';
import { detectEngine, moduleServesAcquireAll } from './detection.js';
import { request, type Engine, type EngineChoice } from './engine.js';
import { BadReplyError } from './errors.js';
import { Deadlines } from './deadlines.js';
import { TimedOut, answered, bounded, errorOf, lost } from './failures.js';
import { Pool } from './pool.js';
import { asFence, asInteger, decodeStatus, type KeyStatus } from './replies.js';
import { waitOn, type WaitAnswer } from './waiting.js';

const asSent = (reply: Reply): Reply => reply;
const grantedFence = (reply: Reply): bigint | null => asFence(reply, 'ACQUIRE');
const renewed = (reply: Reply): boolean => asInteger(reply, 'RENEW') === 1n;
const released = (reply: Reply): boolean => asInteger(reply, 'RELEASE') === 1n;

/** The per-server options a locker applies. */
export interface ServerOptions {
  readonly timeoutMs: number;
  readonly maxBlocking: number;
  readonly engine: EngineChoice;
}

/** One lock server. */
export class Server {
  #engine: Promise<Engine> | undefined;
  #found: Engine | undefined;
  /** Whether the module here serves `ACQUIREALL`, asked by the first `acquireAll` on the module. */
  #acquireAll: Promise<boolean> | undefined;
  readonly pool: Pool<DedicatedConnection>;
  /** The timeout of every request on the shared connection (one timer, not one per request). */
  readonly #deadlines: Deadlines;
  readonly #timedOut: string;

  constructor(readonly backend: Backend, readonly options: ServerOptions) {
    this.pool = new Pool(options.maxBlocking, (conn) => conn.close());
    this.#deadlines = new Deadlines(options.timeoutMs);
    this.#timedOut = `no answer within ${options.timeoutMs} ms`;
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
    return errorOf(this.name, err, secret);
  }

  /**
   * One command on the shared connection, within the timeout. A script the server lost (a
   * restart, a failover, `SCRIPT FLUSH`) or a library a primary lacks (a cluster's new node)
   * is loaded again, and the command sent once more.
   */
  call(args: readonly Arg[], key?: string): Promise<Reply> {
    return this.#ask(args, key, asSent, false, undefined);
  }

  /**
   * `call`, its reply read by `read` and, with `mapped`, its failure as this package's error
   * (`error`, `secret` never shown): one promise chained on the client library's, bounded by
   * the server's `Deadlines`. The lease path's every request comes here, so this is written
   * for the fewest promises, closures and timers per request (issue #44).
   */
  #ask<T>(args: readonly Arg[], key: string | undefined, read: (reply: Reply) => T, mapped: boolean, secret: string | undefined): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const pending = this.#deadlines.add(() => reject(this.#failure(new TimedOut(this.#timedOut), mapped, secret)));
      const wire = this.backend.wire();
      const failed = (err: unknown): void => {
        if (!this.#deadlines.settle(pending)) return;
        const e = wire.failure(err);
        const reload = lost(e);
        if (!reload) return reject(this.#failure(e, mapped, secret));
        this.#reloaded(reload, args, key)
          .then(read)
          .then(resolve, (again: unknown) => reject(this.#failure(again, mapped, secret)));
      };
      let reply: Promise<unknown>;
      try {
        reply = wire.send(args, key);
      } catch (err) {
        return failed(err);
      }
      reply.then((value) => {
        if (!this.#deadlines.settle(pending)) return;
        try {
          resolve(read(wire.read(value)));
        } catch (err) {
          reject(this.#failure(err, mapped, secret));
        }
      }, failed);
    });
  }

  #failure(err: unknown, mapped: boolean, secret: string | undefined): unknown {
    return mapped ? this.error(err, secret) : err;
  }

  /** `args` again after loading what the server lost, each step within the timeout. */
  async #reloaded(reload: readonly Arg[], args: readonly Arg[], key: string | undefined): Promise<Reply> {
    await bounded(this.backend.everywhere(reload), this.options.timeoutMs);
    return bounded(this.backend.shared().call(args, key), this.options.timeoutMs);
  }

  /** The engine this server serves leases with, asking the server on the first call. */
  detect(): Promise<Engine> {
    if (this.#found && this.#engine) return this.#engine;
    if (!this.#engine) {
      this.#engine = detectEngine(this).then(
        (engine) => ((this.#found = engine), engine),
        (err: unknown) => {
          this.#engine = undefined;
          throw this.error(err);
        },
      );
    }
    return this.#engine;
  }

  /** One ACQUIRE attempt on the shared connection: the fence, or null while held elsewhere. */
  acquire(req: AcquireRequest): Promise<bigint | null> {
    const engine = this.#found;
    if (engine === undefined) return this.detect().then((found) => this.#ask(acquireWords(found, req, false), req.key, grantedFence, true, req.token));
    return this.#ask(acquireWords(engine, req, false), req.key, grantedFence, true, req.token);
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
      this.#acquireAll = moduleServesAcquireAll(this).catch((err: unknown) => {
        this.#acquireAll = undefined;
        throw this.error(err);
      });
    }
    return this.#acquireAll;
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
      const reply = await this.call(acquireAllWords(engine, keys, req), keys[0]);
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

  renew(key: string, token: string, ttlMs: number): Promise<boolean> {
    const engine = this.#found;
    if (engine === undefined) return this.detect().then((found) => this.#ask(request(found, 'renew', key, [token, String(ttlMs)]), key, renewed, true, token));
    return this.#ask(request(engine, 'renew', key, [token, String(ttlMs)]), key, renewed, true, token);
  }

  release(key: string, token: string): Promise<boolean> {
    const engine = this.#found;
    if (engine === undefined) return this.detect().then((found) => this.#ask(request(found, 'release', key, [token]), key, released, true, token));
    return this.#ask(request(engine, 'release', key, [token]), key, released, true, token);
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
      const answer = await waitOn(conn, { engine, backend: this.backend, timeoutMs: this.options.timeoutMs }, req, until, signal);
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
}
