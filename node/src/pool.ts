/**
 * Connections for requests that block, per server: at most `limit` in use at once, further
 * waiters queued in arrival order for a free one, idle ones kept for reuse. A blocked request
 * holds its connection until answered, so it must never share the one that carries renewals.
 */

interface Waiter<C> {
  grant(checkout: Checkout<C>): void;
}

/** A connection slot held by one request; `done` gives it back (with the connection to keep, if any). */
export interface Checkout<C> {
  readonly idle: C | undefined;
  done(keep: C | undefined): void;
}

export class Pool<C> {
  #busy = 0;
  readonly #idle: C[] = [];
  readonly #queue: Waiter<C>[] = [];

  constructor(readonly limit: number, readonly discard: (conn: C) => void) {}

  /** Whether requests may wait on the server at all (a limit of 0 turns it off). */
  get enabled(): boolean {
    return this.limit > 0;
  }

  /** A slot, waiting in line until `until` (`performance.now()` ms); undefined if none came in time. */
  checkOut(until: number, signal?: AbortSignal): Promise<Checkout<C> | undefined> {
    if (this.#busy < this.limit && this.#queue.length === 0) return Promise.resolve(this.#take());
    return new Promise((resolve) => {
      const waiter: Waiter<C> = {
        grant: (checkout) => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', giveUp);
          resolve(checkout);
        },
      };
      const giveUp = (): void => {
        const at = this.#queue.indexOf(waiter);
        if (at >= 0) this.#queue.splice(at, 1);
        clearTimeout(timer);
        resolve(undefined);
      };
      const timer = setTimeout(giveUp, Math.max(0, until - performance.now()));
      signal?.addEventListener('abort', giveUp, { once: true });
      this.#queue.push(waiter);
    });
  }

  #take(): Checkout<C> {
    this.#busy++;
    let returned = false;
    return {
      idle: this.#idle.pop(),
      done: (keep) => {
        if (returned) return;
        returned = true;
        this.#busy--;
        if (keep !== undefined) this.#idle.push(keep);
        const next = this.#queue.shift();
        if (next) next.grant(this.#take());
      },
    };
  }

  /** Closes the idle connections. */
  drain(): void {
    for (const conn of this.#idle.splice(0)) this.discard(conn);
  }
}
