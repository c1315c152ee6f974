/**
 * Fenced semaphores: up to N holders of one key at once, each an ordinary `Lease` with its own
 * token and fence (`ACQUIRE … PERMITS n`). Fences strictly increase over every grant on the
 * key, so fence each holder against its own slot of the resource, not one global maximum.
 * On a `Locker` only: a quorum of independent masters cannot bound the holders.
 */
import type { Lease } from './lease.js';
import type { Locker } from './locker.js';
import { ContendedError, brand, isBranded } from './errors.js';
import { checkKey, checkLabel, checkPermits, type AcquireOptions } from './options.js';
import type { KeyStatus } from './replies.js';

export class Semaphore {
  /** `instanceof` across the ESM and CommonJS builds (see `brand` in errors.ts). */
  static [Symbol.hasInstance](value: unknown): boolean {
    return isBranded(this, value);
  }

  readonly #label: Buffer | string | undefined;
  readonly permits: number;

  constructor(readonly locker: Locker, readonly key: string, permits: number, options: { readonly label?: string | Buffer } = {}) {
    checkKey(key);
    this.permits = checkPermits(permits);
    this.#label = options.label === undefined ? undefined : checkLabel(options.label);
  }

  /** A permit, or null while all are held (after waiting up to `wait`, in the server's queue). */
  acquire(options: AcquireOptions = {}): Promise<Lease | null> {
    return this.locker.take(this.key, options, { label: this.#label, permits: this.permits });
  }

  /** `Locker.using` for a permit. */
  async using<T>(options: AcquireOptions, body: (signal: AbortSignal, lease: Lease) => Promise<T>): Promise<T> {
    const lease = await this.acquire(options);
    if (!lease) throw new ContendedError(this.key);
    return this.locker.keepAliveWhile(lease, body);
  }

  /** The key's permits and unexpired holders (fence, time left, label; never a token). */
  status(): Promise<KeyStatus | null> {
    return this.locker.status(this.key);
  }
}
brand(Semaphore, 'Semaphore');
