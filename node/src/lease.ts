/**
 * A held lease: the fence to send with every write, the validity measured on this process's
 * monotonic clock (`performance.now()`) from before the granting request was sent, minus the
 * drift allowance, and the token (128 random bits), which never leaves the object.
 */
import type { Core } from './core.js';
import { LeaseLostError } from './errors.js';
import { drift } from './options.js';

export class Lease {
  readonly #core: Core;
  readonly #token: string;
  #validUntil: number;
  #released = false;

  /** @internal Made by `Locker`, `Redlock` and `Semaphore`. */
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
  async release(): Promise<boolean> {
    this.#released = true;
    this.#validUntil = Math.min(this.#validUntil, performance.now());
    return this.#core.release(this.key, this.#token);
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
