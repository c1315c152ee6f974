/**
 * `Locker` (one server, or a Redis Cluster routed by key) and `Redlock` (a majority of N
 * independent masters, fenced): acquire, wait, keep alive, release. Both run the same
 * algorithm (`core.ts`); a waiting step is `wait-turn.ts`'s, the wait itself the server's
 * (`waiting.ts`).
 */
import { setTimeout as sleep } from 'node:timers/promises';

import { newToken, type AcquireRequest } from './acquire-request.js';
import { IORedisBackend, isIORedis, type IORedisLike } from './ioredis.js';
import { NodeRedisBackend, isNodeRedis, type NodeRedisLike } from './node-redis.js';
import { SUPPORTED_CLIENTS, type Backend } from './connection.js';
import { Core, mayHold } from './core.js';
import type { Engine } from './engine.js';
import { ContendedError, FencedLockError, InvalidArgumentError, LeaseLostError, ServerError, brand, isBranded } from './errors.js';
import { KeepAlive } from './keepalive.js';
import { Lease } from './lease.js';
import { Leases, busyKey, canonicalOrder, giveBack, giveBackSet, refresh } from './multi.js';
import { checkKey, checkTtl, checkTtlOn, checkWait, drift, settle, type AcquireOptions, type LockerOptions, type Settings } from './options.js';
import { LIBRARY_MAX_TTL_MS, MAX_ACQUIRE_KEYS, keySlot } from './protocol.js';
import type { KeyStatus } from './replies.js';
import { Server } from './server.js';
import { abortError, isAgain, waitTurn, type Again, type Won } from './wait-turn.js';

/** An ioredis `Redis` or `Cluster`, or a node-redis (v5+) client or cluster. */
export type RedisClient = object;

/** A client the locker made from a URL, and how to close it. */
interface Owned {
  readonly client: RedisClient;
  close(): Promise<void>;
}

function missing(err: unknown): boolean {
  const code = (err as { code?: string } | null)?.code;
  return code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND';
}

/**
 * A client for `url`, made with whichever client package is installed (ioredis first, then
 * node-redis), reading integers exactly; the locker owns it and `close()` closes it.
 */
async function clientFor(url: string): Promise<Owned> {
  try {
    const { Redis } = (await import('ioredis')) as unknown as { Redis: new (url: string, options: object) => IORedisLike & { disconnect(): void } };
    const client = new Redis(url, { stringNumbers: true });
    client.on('error', () => {});
    return { client, close: async () => client.disconnect() };
  } catch (err) {
    if (!missing(err)) throw err;
  }
  try {
    const { createClient } = (await import('redis')) as unknown as { createClient: (options: object) => NodeRedisLike };
    const client = createClient({ url });
    client.on('error', () => {});
    await client.connect();
    return { client, close: async () => client.destroy?.() };
  } catch (err) {
    if (!missing(err)) throw err;
  }
  throw new InvalidArgumentError(`a URL (${url}) needs a client package: npm install ioredis (or redis); supported: ${SUPPORTED_CLIENTS}`);
}

function backendOf(client: RedisClient): Backend {
  if (isIORedis(client)) return new IORedisBackend(client);
  if (isNodeRedis(client)) return new NodeRedisBackend(client);
  throw new InvalidArgumentError(`expected a client of a supported library (${SUPPORTED_CLIENTS}): an ioredis Redis or Cluster, or a node-redis createClient or createCluster`);
}

/** What a lease is asked on besides its key: a public label, a semaphore's permits, or a read lease. */
export interface Terms {
  readonly label?: Buffer | string | undefined;
  readonly permits?: number | undefined;
  readonly shared?: boolean | undefined;
}

/**
 * What `using` rejects with when the lease was lost while the body ran and the body then
 * failed: the loss itself if the body rethrew it, else a `LeaseLostError` of the same key and
 * reason with the body's error as its `cause`.
 */
function lossOf(loss: unknown, bodyError: unknown): unknown {
  if (!(loss instanceof LeaseLostError) || bodyError === loss) return loss;
  return new LeaseLostError(loss.key, loss.reason, { cause: bodyError, renewalError: loss.renewalError });
}

/** A call's options and terms when none are given: one object each, not one per call. */
const NO_OPTIONS: AcquireOptions = Object.freeze({});
const NO_TERMS: Terms = Object.freeze({});

/** The jittered delay before retry `round`: random in [20, min(400, 20 * 2^round)] ms. */
function backoff(round: number): number {
  const max = Math.min(400, 20 * 2 ** Math.min(round, 10));
  return 20 + Math.random() * (max - 20);
}

/** The shared base of `Locker` and `Redlock`. */
abstract class Base {
  /** `instanceof` across the ESM and CommonJS builds (see `brand` in errors.ts). */
  static [Symbol.hasInstance](value: unknown): boolean {
    return isBranded(this, value);
  }

  /** @internal */
  readonly core: Core;
  /** @internal */
  readonly settings: Settings;
  /** Clients made from URLs, closed with the locker. */
  protected readonly owned: Owned[] = [];

  protected constructor(clients: readonly RedisClient[], options: LockerOptions | undefined, raise: boolean) {
    this.settings = settle(options);
    const s = this.settings;
    const servers = clients.map((client) => new Server(backendOf(client), { timeoutMs: s.timeout, maxBlocking: s.maxBlocking, engine: s.engine }));
    const names = new Set<string>();
    for (const server of servers) {
      if (names.has(server.name)) throw new InvalidArgumentError(`server ${server.name} is given twice; Redlock needs independent servers, each once`);
      names.add(server.name);
    }
    this.core = new Core(servers, s, raise);
  }

  /**
   * A lease on `key`, or null while another owner holds it (after waiting up to `wait` ms,
   * queued on the server). Throws `InvalidArgumentError` before sending anything for a bad
   * key, ttl or wait, and the server's error when it could not answer.
   */
  acquire(key: string, options: AcquireOptions = NO_OPTIONS): Promise<Lease | null> {
    return this.take(key, options, NO_TERMS);
  }

  /**
   * A lease on every key of `keys`, each with its own fence, or none: waiting up to `wait` ms
   * in all. On a `Locker` whose server's module serves `FENCEDLOCK.ACQUIREALL` (on a Redis
   * Cluster: keys of one slot), or whose server runs the Functions library or its script form
   * and the keys are of one slot (hash tags; on any server), at most 64 keys, the set is taken
   * in one command for one token, sent again with backoff while any key is busy, holding
   * nothing in between; elsewhere key by key, in the
   * keys' byte order (so overlapping sets named in different orders never deadlock), releasing
   * what was taken when a key is refused. A set still busy after the wait is a
   * `ContendedError` naming a key held; no keys, a bad key or a key named twice, an
   * `InvalidArgumentError` before anything is sent. The leases come in the order named.
   */
  acquireAll(keys: readonly string[], options: AcquireOptions = {}): Promise<Leases> {
    return this.takeAll(keys, options, {});
  }

  /** `acquireAll` with one attempt (per key, key by key): a `ContendedError` as soon as a key is held elsewhere, nothing kept. */
  tryAcquireAll(keys: readonly string[], options: Omit<AcquireOptions, 'wait'> = {}): Promise<Leases> {
    return this.takeAll(keys, { ...options, wait: 0 }, {});
  }

  /**
   * Runs `body` under a lease on `key`, kept alive every `renewInterval` (ttl / 3), and
   * releases it at the end. `signal` is aborted, with a `LeaseLostError`, the moment the lease
   * is lost (the first failed renewal, or the validity running out): stop writing then. The
   * body's error is rethrown; a body that returns after its lease was lost rejects with the
   * `LeaseLostError`. A busy lock after the wait is a `ContendedError`: the body never runs
   * without the lease.
   */
  async using<T>(key: string, options: AcquireOptions, body: (signal: AbortSignal, lease: Lease) => Promise<T>): Promise<T> {
    const lease = await this.take(key, options, NO_TERMS);
    if (!lease) throw new ContendedError(key);
    return this.keepAliveWhile(lease, body);
  }

  /** @internal */
  async keepAliveWhile<T>(lease: Lease, body: (signal: AbortSignal, lease: Lease) => Promise<T>): Promise<T> {
    const interval = this.settings.renewInterval ?? lease.ttl / 3;
    const keeper = new KeepAlive(lease, interval);
    try {
      let result: T;
      try {
        result = await body(keeper.signal, lease);
      } catch (err) {
        // A body that stops at the signal rejects with what it awaited: an `AbortError` of
        // node:timers/promises or fetch, the loss only in its `cause`. The loss is the outcome.
        if (keeper.signal.aborted) throw lossOf(keeper.signal.reason, err);
        throw err;
      }
      if (keeper.signal.aborted) throw keeper.signal.reason;
      return result;
    } finally {
      keeper.stop();
      await lease.release().catch(() => false);
    }
  }

  /** The engine the (first) server serves leases with, asking it if no request has yet. */
  engine(): Promise<Engine> {
    const first = this.core.servers[0];
    if (!first) throw new InvalidArgumentError('no server');
    return first.detect();
  }

  /** Closes the connections the locker opened itself (waiting connections, an exact-integer copy); never the client given. */
  async close(): Promise<void> {
    for (const server of this.core.servers) {
      server.pool.drain();
      await server.backend.close();
    }
    for (const owned of this.owned.splice(0)) await owned.close();
  }

  /**
   * @internal One acquisition, waiting as the options say. A bad argument rejects (never
   * throws), before anything is sent.
   */
  take(key: string, options: AcquireOptions, terms: Terms): Promise<Lease | null> {
    let ttl: number;
    let wait: number;
    try {
      checkKey(key);
      ttl = this.#ttl(options);
      wait = options.wait === undefined ? this.settings.wait : checkWait(options.wait);
    } catch (err) {
      return Promise.reject(err);
    }
    const signal = options.signal;
    if (wait !== 0 || ttl > LIBRARY_MAX_TTL_MS) return this.#takeWaiting(key, ttl, wait, signal, terms);
    // One attempt (the default): no rounds, and the lease made on the attempt's own promise.
    if (signal?.aborted) return Promise.reject(abortError(signal));
    const req: AcquireRequest = { key, token: newToken(), ttlMs: ttl, label: terms.label, permits: terms.permits, shared: terms.shared };
    const core = this.core;
    const lease = core.attemptAs(req, (fence, validUntil, token) => new Lease(core, key, token, fence, validUntil, ttl));
    if (signal === undefined) return lease;
    return lease.catch((err: unknown) => {
      throw signal.aborted ? abortError(signal) : err;
    });
  }

  /** `take` with a wait (rounds until `wait` ms passed), or a ttl the engines must be asked about first. */
  async #takeWaiting(key: string, ttl: number, wait: number, signal: AbortSignal | undefined, terms: Terms): Promise<Lease | null> {
    if (ttl > LIBRARY_MAX_TTL_MS) await this.#checkTtlOnEngines(ttl);
    const giveUp = performance.now() + wait;
    for (let round = 0; ; round++) {
      if (signal?.aborted) throw abortError(signal);
      // Every round asks with a token of its own, never an earlier round's. A round that failed
      // without an answer may have been granted unheard, so its token is given back in the
      // background: at once, and after a waiting request again one timeout later
      // (`releaseAfterWait`), on the shared connection while the retry may wait on a connection
      // of its own, so nothing orders those releases before the retry's grant. Had the retry
      // asked with the same token, they would end the lease it hands out: the caller would work
      // under a lease another client can take (two holders). With a new token they can end only
      // the earlier round's late grant.
      const req: AcquireRequest = { key, token: newToken(), ttlMs: ttl, label: terms.label, permits: terms.permits, shared: terms.shared };
      let grant: Won | null | Again;
      try {
        grant = performance.now() < giveUp && this.settings.maxBlocking > 0 ? await waitTurn(this.core, req, giveUp, signal) : await this.core.attempt(req);
      } catch (err) {
        if (signal?.aborted) throw abortError(signal);
        if (!(err instanceof FencedLockError && err.isRetryable()) || performance.now() >= giveUp) throw err;
        grant = { again: true, error: err };
      }
      if (grant !== null && !isAgain(grant)) return new Lease(this.core, key, grant.token, grant.fence, grant.validUntil, ttl);
      const left = giveUp - performance.now();
      if (left <= 0) {
        // The last round's outcome: held elsewhere (null, or a round refused), or its error.
        if (grant === null || grant.error === undefined) return null;
        throw grant.error;
      }
      await sleep(Math.min(backoff(round), left), undefined, signal ? { signal } : undefined).catch(() => undefined);
    }
  }

  /**
   * A call's ttl and wait, checked (the drift allowance must leave the ttl some validity, and a
   * ttl above the Functions library's limit is checked against the engines), and the moment it
   * gives up: one reading of the options for a key and for a set.
   */
  async #timing(options: AcquireOptions): Promise<{ ttl: number; wait: number; giveUp: number; signal: AbortSignal | undefined }> {
    const ttl = this.#ttl(options);
    const wait = checkWait(options.wait ?? this.settings.wait);
    if (ttl > LIBRARY_MAX_TTL_MS) await this.#checkTtlOnEngines(ttl);
    return { ttl, wait, giveUp: performance.now() + wait, signal: options.signal };
  }

  /** A call's ttl, checked; the locker's own was checked when it was made. */
  #ttl(options: AcquireOptions): number {
    if (options.ttl === undefined) return this.settings.ttl;
    const ttl = checkTtl(options.ttl);
    if (drift(this.settings, ttl) >= ttl) throw new InvalidArgumentError(`the drift allowance leaves no validity in a ${ttl} ms ttl`);
    return ttl;
  }

  /**
   * A ttl above the Functions library's limit is refused before it is sent to a server that
   * runs the library (which would answer naming the module's config, which it does not have).
   * Only such a ttl makes the engines be asked for here.
   */
  async #checkTtlOnEngines(ttl: number): Promise<void> {
    for (const server of this.core.servers) {
      const engine = server.engine ?? (await server.detect().catch(() => undefined));
      if (engine !== undefined) checkTtlOn(engine, ttl);
    }
  }

  /**
   * The one server a set may be taken on in one `ACQUIREALL`, if any: a `Locker`'s. A Redlock
   * has none, whatever its number of masters.
   */
  protected oneServer(): Server | undefined {
    return undefined;
  }

  /** @internal Several keys, all or none (`multi.ts`), waiting as the options say. */
  async takeAll(keys: readonly string[], options: AcquireOptions, terms: Terms): Promise<Leases> {
    const order = canonicalOrder(keys);
    const { ttl, giveUp, signal } = await this.#timing(options);
    const server = await this.#oneCommandServer(keys);
    if (server) return this.#takeAtOnce(server, keys, { ttl, giveUp, signal }, terms);
    const taken: (Lease | undefined)[] = keys.map(() => undefined);
    try {
      for (const i of order) {
        const key = keys[i] ?? '';
        const left = Math.max(0, giveUp - performance.now());
        const lease = await this.take(key, { ttl, wait: left, ...(signal ? { signal } : {}) }, terms);
        if (!lease) throw new ContendedError(key);
        taken[i] = lease;
      }
      const leases = taken.filter((lease): lease is Lease => lease !== undefined);
      await refresh(leases, this.settings);
      return new Leases(leases);
    } catch (err) {
      await giveBack(taken);
      throw err;
    }
  }

  /**
   * The server that takes `keys` in one `ACQUIREALL`, if there is one: a `Locker`'s, for at
   * most `MAX_ACQUIRE_KEYS` keys, where `Server.servesAcquireAll` says so (the library: keys of
   * one slot, on any server; the module: keys of one slot on a cluster). A server that cannot
   * be asked now is passed over: the keys are then taken one by one, with each key's retries.
   */
  async #oneCommandServer(keys: readonly string[]): Promise<Server | undefined> {
    const server = this.oneServer();
    if (!server || keys.length > MAX_ACQUIRE_KEYS) return undefined;
    const slot = keySlot(Buffer.from(keys[0] ?? '', 'utf8'));
    const oneSlot = keys.every((key) => keySlot(Buffer.from(key, 'utf8')) === slot);
    const serves = await server.servesAcquireAll(oneSlot).catch(() => false);
    return serves ? server : undefined;
  }

  /**
   * `keys` in `ACQUIREALL`s for one token on `server`: once, or with backoff until granted, an
   * error is final, or `giveUp`. Every attempt sends the same token, so one whose reply was
   * lost and that is sent again gets the same fences; a call that fails after an attempt that
   * may have been granted releases every key. (So the one token is safe to send again: no
   * release of it is sent before the call gives up, when no lease of it is handed out.)
   */
  async #takeAtOnce(server: Server, keys: readonly string[], bounds: { ttl: number; giveUp: number; signal: AbortSignal | undefined }, terms: Terms): Promise<Leases> {
    const { ttl, giveUp, signal } = bounds;
    const token = newToken();
    const req = { token, ttlMs: ttl, label: terms.label, permits: terms.permits, shared: terms.shared };
    let mayBeHeld = false;
    for (let round = 0; ; round++) {
      if (signal?.aborted) {
        if (mayBeHeld) await giveBackSet(server, keys, token);
        throw abortError(signal);
      }
      const sent = performance.now();
      // undefined: refused (a key held by another token, or waited for).
      let failure: unknown;
      try {
        const fences = await server.acquireAll(keys, req);
        if (fences !== null) {
          const validUntil = this.core.deadline(sent, ttl);
          if (performance.now() < validUntil) {
            return new Leases(fences.map((fence, i) => new Lease(this.core, keys[i] ?? '', token, fence, validUntil, ttl)));
          }
          mayBeHeld = true;
          failure = new ServerError(server.name, 'TimedOut', 'the grant took longer than the lease', undefined);
        }
      } catch (err) {
        if (mayHold(err)) mayBeHeld = true;
        failure = err;
      }
      const left = giveUp - performance.now();
      const retryable = failure === undefined || (failure instanceof FencedLockError && failure.isRetryable());
      if (!retryable || left <= 0) {
        if (mayBeHeld) await giveBackSet(server, keys, token);
        if (failure === undefined) throw new ContendedError(await busyKey(server, keys));
        throw failure;
      }
      await sleep(Math.min(backoff(round), left), undefined, signal ? { signal } : undefined).catch(() => undefined);
    }
  }

}

/**
 * Leases from one server, or from one Redis Cluster (the key's slot owner), over the user's
 * own client: an ioredis `Redis` or `Cluster`, or a node-redis (v5+) client or cluster.
 */
export class Locker extends Base {
  constructor(client: RedisClient, options?: LockerOptions) {
    super([client], options, false);
  }

  /**
   * A locker over a connection of its own to `url` (`redis://[user:password@]host:port[/db]`,
   * `rediss://` for TLS), made with ioredis or node-redis, whichever is installed, and closed by
   * `close()`. Prefer `new Locker(client)` where the application already has a client.
   */
  static async open(url: string, options?: LockerOptions): Promise<Locker> {
    const owned = await clientFor(url);
    try {
      const locker = new Locker(owned.client, options);
      locker.owned.push(owned);
      return locker;
    } catch (err) {
      await owned.close();
      throw err;
    }
  }

  protected override oneServer(): Server | undefined {
    return this.core.servers[0];
  }

  /** The key's fence and holders (never a token); null for a key without lock state. */
  async status(key: string): Promise<KeyStatus | null> {
    const server = this.core.servers[0];
    if (!server) return null;
    return server.status(checkKey(key));
  }
}

/**
 * Leases by majority of N independent masters (Redlock), with a fence that increases across
 * successive grants (fenced Redlock): after a majority granted, every granting master's fence
 * is raised to the majority's largest, owner-checked, and the lease is handed out only once a
 * majority confirmed. Validity is the ttl minus the round's time minus drift.
 */
export class Redlock extends Base {
  constructor(clients: readonly RedisClient[], options?: LockerOptions & { readonly fencing?: 'raise' | 'quorum-max' }) {
    if (clients.length === 0) throw new InvalidArgumentError('a Redlock needs at least one master');
    super(clients, options, (options?.fencing ?? 'raise') === 'raise');
  }

  /** A Redlock over connections of its own to `urls`, one per master (see `Locker.open`). */
  static async open(urls: readonly string[], options?: LockerOptions & { readonly fencing?: 'raise' | 'quorum-max' }): Promise<Redlock> {
    const owned: Owned[] = [];
    try {
      for (const url of urls) owned.push(await clientFor(url));
      const redlock = new Redlock(owned.map((o) => o.client), options);
      redlock.owned.push(...owned);
      return redlock;
    } catch (err) {
      for (const o of owned) await o.close();
      throw err;
    }
  }
}
brand(Locker, 'Locker');
brand(Redlock, 'Redlock');
