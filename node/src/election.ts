/**
 * Leader election on one key, after etcd's Election API: candidates campaign in the server's
 * queue, the leader holds a kept-alive lease carrying its public label, and the lease's fence
 * is the leader's **epoch**. Downstream resources must refuse writes with older epochs: a
 * deposed leader that was frozen still believes it leads until it next looks.
 */
import type { Lease } from './lease.js';
import type { Locker } from './locker.js';
import { KeepAlive } from './keepalive.js';
import { checkKey, checkLabel } from './options.js';
import { brand, isBranded } from './errors.js';

/** Who leads, as the server tells anyone: never the token. */
export interface Leader {
  readonly label: Buffer | null;
  readonly epoch: bigint;
  readonly remainingMs: number;
}

/** The shortest time one campaign request waits in the queue before it is sent again. */
export const MIN_CAMPAIGN_WINDOW_MS = 1000;

/** Being the leader: a kept-alive lease whose fence is the epoch. */
export class Leadership {
  /** `instanceof` across the ESM and CommonJS builds (see `brand` in errors.ts). */
  static [Symbol.hasInstance](value: unknown): boolean {
    return isBranded(this, value);
  }

  readonly #keeper: KeepAlive;

  /** @internal */
  constructor(readonly lease: Lease, keeper: KeepAlive, readonly label: Buffer | string) {
    this.#keeper = keeper;
  }

  /** The epoch: higher than every earlier leader's. Send it with every write. */
  get epoch(): bigint {
    return this.lease.fence;
  }

  /** Aborted, with a `LeaseLostError`, when leadership is lost, before a successor can be elected. */
  get signal(): AbortSignal {
    return this.#keeper.signal;
  }

  /** Steps down: the next queued candidate is elected at once. True if we still led. */
  async resign(): Promise<boolean> {
    this.#keeper.stop();
    return this.lease.release();
  }
}

export class Election {
  /** `instanceof` across the ESM and CommonJS builds (see `brand` in errors.ts). */
  static [Symbol.hasInstance](value: unknown): boolean {
    return isBranded(this, value);
  }

  constructor(readonly locker: Locker, readonly key: string) {
    checkKey(key);
  }

  /**
   * Waits until elected (no time limit; `signal` gives up, leaving nothing behind), then
   * leads under a kept-alive lease labelled `label` (public: `leader()` shows it to anyone).
   */
  async campaign(label: string | Buffer, options: { readonly signal?: AbortSignal } = {}): Promise<Leadership> {
    const bytes = checkLabel(label);
    const window = Math.max(this.locker.settings.wait, MIN_CAMPAIGN_WINDOW_MS);
    for (;;) {
      const lease = await this.locker.take(this.key, { wait: window, ...(options.signal ? { signal: options.signal } : {}) }, { label: bytes });
      if (lease) {
        const keeper = new KeepAlive(lease, this.locker.settings.renewInterval ?? lease.ttl / 3);
        return new Leadership(lease, keeper, bytes);
      }
    }
  }

  /** Who leads now; null while nobody does. */
  async leader(): Promise<Leader | null> {
    const server = this.locker.core.servers[0];
    const status = server ? await server.status(this.key) : null;
    const holder = status?.holders[0];
    if (!status || !holder) return null;
    return { label: holder.label, epoch: holder.fence, remainingMs: holder.remainingMs };
  }

  /**
   * The leadership as it changes: the current one first, then each change of leader or epoch
   * (never a mere renewal), polled every `interval` ms (default the renew interval) and just
   * after the current lease would run out. Stops when `signal` aborts.
   */
  async *observe(options: { readonly interval?: number; readonly signal?: AbortSignal } = {}): AsyncGenerator<Leader | null> {
    const every = Math.max(10, options.interval ?? this.locker.settings.renewInterval ?? this.locker.settings.ttl / 3);
    let last: string | undefined;
    let pause = 0;
    while (!options.signal?.aborted) {
      if (pause > 0) await new Promise((resolve) => setTimeout(resolve, pause));
      if (options.signal?.aborted) return;
      const leader = await this.leader();
      pause = leader ? Math.max(10, Math.min(every, leader.remainingMs + 1)) : every;
      const identity = leader ? `${leader.epoch}:${leader.label?.toString('hex') ?? ''}` : '';
      if (identity !== last) {
        last = identity;
        yield leader;
      }
    }
  }
}
brand(Election, 'Election');
brand(Leadership, 'Leadership');
