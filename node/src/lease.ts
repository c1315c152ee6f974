/**
 * A held lease: the fence to send with every write, the validity measured on this process's
 * monotonic clock (`performance.now()`) from before the granting request was sent, minus the
 * drift allowance, and the token (128 random bits), which never leaves the object.
 */
import type { Core } from './core.js';
import { InvalidArgumentError, LeaseLostError, brand, isBranded } from './errors.js';
import { drift } from './options.js';

export class Lease {
  /** `instanceof` across the ESM and CommonJS builds (see `brand` in errors.ts). */
  static [Symbol.hasInstance](value: unknown): boolean {
    return isBranded(this, value);
  }

  readonly #core: Core;
  readonly #token: string;
  #validUntil: number;
  #released = false;

  /** @internal Made by `Locker`, `Redlock`, `Semaphore` and `ReadWriteLock`. */
  constructor(core: Core, key: string, token: string, readonly fence: bigint, validUntil: number, readonly ttl: number) {
    this.#core = core;
    this.key = key;
    this.#token = token;
    this.#validUntil = validUntil;
  }

  /** The lock key. */
  readonly key: string;

  /** When the lease stops being safe to rely on (`performance.now()` ms). */
  get validUntil(): number {
    return this.#validUntil;
  }

  /** Validity left, in ms; 0 once expired. */
  remaining(): number {
    return Math.max(0, this.#validUntil - performance.now());
  }

  /** Whether some validity is left. */
  isValid(): boolean {
    return performance.now() < this.#validUntil;
  }

  /** Throws `LeaseLostError` once the validity ran out. */
  ensureValid(): void {
    if (!this.isValid()) throw new LeaseLostError(this.key, 'Expired');
  }

  /**
   * Extends the lease to a full ttl from now (measured from before the request). Throws
   * `LeaseLostError` when the validity already ran out or the server no longer holds it; a
   * timeout or server error leaves the lease as it was.
   */
  async renew(): Promise<void> {
    this.ensureValid();
    const validUntil = await this.#core.renew(this.key, this.#token, this.ttl);
    if (validUntil === null) {
      this.#validUntil = Math.min(this.#validUntil, performance.now());
      throw new LeaseLostError(this.key, 'Refused');
    }
    this.#validUntil = validUntil;
  }

  /** Ends the lease: true if the server still held it, false if it had expired or been taken over. */
  release(): Promise<boolean> {
    this.#released = true;
    this.#validUntil = Math.min(this.#validUntil, performance.now());
    return this.#core.release(this.key, this.#token);
  }

  /**
   * @internal `ReadWriteLock.downgrade`: `ACQUIRE … SHARED` with this write lease's own token,
   * one attempt, no wait, on `core`'s one server. The server keeps the fence and restarts the
   * lease as a read lease (a fresh ttl, measured from before the request). Any other answer
   * means the lease had ended (another writer may have come between): a new grant is released
   * again, and the lease is lost (`LeaseLostError`).
   */
  async reaskShared(core: Core, label: Buffer | string | undefined): Promise<void> {
    const server = core.servers.length === 1 ? core.servers[0] : undefined;
    if (core !== this.#core || !server) throw new InvalidArgumentError("downgrade takes a lease this lock's locker granted");
    this.ensureValid();
    const sent = performance.now();
    const fence = await server.acquire({ key: this.key, token: this.#token, ttlMs: this.ttl, label, shared: true });
    if (fence === this.fence) {
      this.#validUntil = core.deadline(sent, this.ttl);
      return;
    }
    // Best effort: what is not released now expires after its ttl.
    if (fence !== null) await server.release(this.key, this.#token).catch(() => false);
    this.#validUntil = Math.min(this.#validUntil, performance.now());
    throw new LeaseLostError(this.key, 'Refused');
  }

  /** Whether `release()` was called. */
  get released(): boolean {
    return this.#released;
  }

  /** When the keep-alive should renew next: one interval after the request behind the deadline. */
  renewalDue(interval: number): number {
    return this.#validUntil - (this.ttl - drift(this.#core.settings, this.ttl)) + interval;
  }

  toJSON(): { key: string; fence: string; remaining: number } {
    return { key: this.key, fence: this.fence.toString(), remaining: this.remaining() };
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return `Lease { key: ${JSON.stringify(this.key)}, fence: ${this.fence}n, remaining: ${Math.round(this.remaining())} ms, token: <redacted> }`;
  }
}
brand(Lease, 'Lease');
