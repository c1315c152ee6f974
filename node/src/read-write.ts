/**
 * Fenced read-write locks: many readers or one writer on a key (`ACQUIRE … SHARED` for a read
 * lease; the plain `ACQUIRE`, the mutex, for the write lease), after the Rust client's
 * `ReadWriteLock`. Both leases are ordinary `Lease`s with fences from the key's one sequence,
 * so a writer's fence is above every reader's and writer's before it. Waiting is the server's
 * queue, in arrival order: readers that come after a waiting writer wait behind it, and the
 * readers queued behind a writer enter together when it leaves. `downgrade` turns the write
 * lease into a read lease keeping its fence; there is no upgrade (the server refuses a
 * reader's own write request: `ServerError` with `replyError` `'UpgradeRefused'`). On a
 * `Locker` only, as semaphores: fenced Redlock cannot lift a key held by several readers to
 * one fence.
 */
import type { Lease } from './lease.js';
import { Locker } from './locker.js';
import { ContendedError, InvalidArgumentError, brand, isBranded } from './errors.js';
import { checkKey, checkLabel, type AcquireOptions } from './options.js';
import type { KeyStatus } from './replies.js';

export class ReadWriteLock {
  /** `instanceof` across the ESM and CommonJS builds (see `brand` in errors.ts). */
  static [Symbol.hasInstance](value: unknown): boolean {
    return isBranded(this, value);
  }

  readonly #label: Buffer | string | undefined;

  /** The read-write lock on `key` of `locker`'s server; its write lease is `locker.acquire(key)`'s lease. */
  constructor(readonly locker: Locker, readonly key: string, options: { readonly label?: string | Buffer } = {}) {
    if (!(locker instanceof Locker)) throw new InvalidArgumentError('a ReadWriteLock runs on a Locker (one server, or a Cluster), as a Semaphore does: not on a Redlock');
    checkKey(key);
    this.#label = options.label === undefined ? undefined : checkLabel(options.label);
  }

  /** A read lease, or null while a writer holds the key or waits for it (after waiting up to `wait`, in the server's queue). */
  read(options: AcquireOptions = {}): Promise<Lease | null> {
    return this.locker.take(this.key, options, { label: this.#label, shared: true });
  }

  /** One attempt at a read lease: null while a writer holds the key or others wait for it. */
  tryRead(options: Omit<AcquireOptions, 'wait'> = {}): Promise<Lease | null> {
    return this.read({ ...options, wait: 0 });
  }

  /**
   * The write lease, or null while anyone holds the key (after waiting up to `wait`, in the
   * server's queue: the readers already in finish, those who come later wait behind it).
   */
  write(options: AcquireOptions = {}): Promise<Lease | null> {
    return this.locker.take(this.key, options, { label: this.#label });
  }

  /** One attempt at the write lease: null while anyone holds the key or others wait for it. */
  tryWrite(options: Omit<AcquireOptions, 'wait'> = {}): Promise<Lease | null> {
    return this.write({ ...options, wait: 0 });
  }

  /** `Locker.using` for a read lease. */
  async usingRead<T>(options: AcquireOptions, body: (signal: AbortSignal, lease: Lease) => Promise<T>): Promise<T> {
    const lease = await this.read(options);
    if (!lease) throw new ContendedError(this.key);
    return this.locker.keepAliveWhile(lease, body);
  }

  /** `Locker.using` for the write lease (which `downgrade` may turn into a read lease in the body). */
  async usingWrite<T>(options: AcquireOptions, body: (signal: AbortSignal, lease: Lease) => Promise<T>): Promise<T> {
    const lease = await this.write(options);
    if (!lease) throw new ContendedError(this.key);
    return this.locker.keepAliveWhile(lease, body);
  }

  /**
   * Turns `lease`, this lock's write lease, into a read lease with the same fence and a fresh
   * ttl; the readers waiting at the head of the queue come in with it. One request, not waited
   * for: nothing can hold the key between the two. A lease that had ended is a
   * `LeaseLostError` (another writer may have come between: a new grant is given back); a
   * lease of another key or locker, an `InvalidArgumentError`.
   */
  async downgrade(lease: Lease): Promise<void> {
    if (lease.key !== this.key) {
      throw new InvalidArgumentError(`downgrade: the lease is on ${JSON.stringify(lease.key)}, this lock's key is ${JSON.stringify(this.key)}`);
    }
    await lease.reaskShared(this.locker.core, this.#label);
  }

  /**
   * The key's holders (fence, time left, label; never a token): readers as `shared`, permits 0
   * (`SHARED_PERMITS`); a writer as one permit; null for a key without lock state.
   */
  status(): Promise<KeyStatus | null> {
    return this.locker.status(this.key);
  }
}
brand(ReadWriteLock, 'ReadWriteLock');
