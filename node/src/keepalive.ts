/**
 * Keep-alive: renew a lease in the background every interval (ttl / 3) and abort a signal the
 * moment it is lost: at the first failed renewal, or when its validity runs out (a renewal
 * still in flight then is too late). Neither timer keeps the process alive.
 */
import { FencedLockError, LeaseLostError } from './errors.js';
import type { Lease } from './lease.js';

export class KeepAlive {
  readonly #controller = new AbortController();
  #renewTimer: NodeJS.Timeout | undefined;
  #expiryTimer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(readonly lease: Lease, readonly interval: number) {
    this.#schedule();
  }

  /** Aborted, with a `LeaseLostError` as its reason, when the lease is lost. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  #schedule(): void {
    clearTimeout(this.#expiryTimer);
    this.#expiryTimer = setTimeout(() => this.#lost(new LeaseLostError(this.lease.key, 'Expired')), Math.max(0, this.lease.validUntil - performance.now()));
    this.#expiryTimer.unref();
    const due = this.lease.renewalDue(this.interval);
    this.#renewTimer = setTimeout(() => void this.#renew(), Math.max(0, due - performance.now()));
    this.#renewTimer.unref();
  }

  async #renew(): Promise<void> {
    if (this.#stopped) return;
    try {
      await this.lease.renew();
    } catch (err) {
      const loss = err instanceof LeaseLostError ? err : new LeaseLostError(this.lease.key, 'RenewFailed', err instanceof FencedLockError ? { cause: err } : undefined);
      this.#lost(loss);
      return;
    }
    if (!this.#stopped) this.#schedule();
  }

  #lost(loss: LeaseLostError): void {
    if (this.#stopped) return;
    this.stop();
    this.#controller.abort(loss);
  }

  /** Stops renewing (the lease stays held until released or expired). */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#renewTimer);
    clearTimeout(this.#expiryTimer);
  }
}
