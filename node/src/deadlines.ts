/**
 * The per-request timeout of a server's shared connection without a timer per request. Every
 * request there has the same bound, so deadlines fall in the order requests are sent: pending
 * requests form a list in that order (a finished one unlinks itself), and one timer, armed for
 * the oldest, fails whatever is overdue when it fires and re-arms for the next. A lease's two
 * requests then cost a list link each instead of a timer set and cleared (Node's timer
 * lists), which the lease path paid on every request (issue #44).
 */

/** A request waiting for its answer (a node of the list, oldest first). */
export interface Pending {
  readonly deadline: number;
  /** Fails the request with its timeout error (called at most once, by the sweep). */
  readonly expire: () => void;
  prev: Pending | undefined;
  next: Pending | undefined;
  /** False once answered or expired: whoever comes second does nothing. */
  open: boolean;
}

/**
 * Firing up to this much before a deadline is on time: a timer's clock (the event loop's
 * millisecond time, taken at the start of an iteration) can run behind `performance.now()`.
 */
const EARLY_MS = 1;

export class Deadlines {
  #oldest: Pending | undefined;
  #newest: Pending | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(readonly ms: number) {}

  /** A request sent now, failed by `expire` if still open `ms` from now. */
  add(expire: () => void): Pending {
    const pending: Pending = { deadline: performance.now() + this.ms, expire, prev: this.#newest, next: undefined, open: true };
    if (this.#newest) this.#newest.next = pending;
    else {
      this.#oldest = pending;
      // As a timer per request did, a request in flight keeps the process alive.
      this.#timer?.ref();
    }
    this.#newest = pending;
    if (!this.#timer) this.#arm(this.ms);
    return pending;
  }

  /** Closes `pending` on its answer: false when it had already expired (the answer is late). */
  settle(pending: Pending): boolean {
    if (!pending.open) return false;
    pending.open = false;
    this.#unlink(pending);
    // Nothing in flight: the timer left armed must not hold an idle process open.
    if (!this.#oldest) this.#timer?.unref();
    return true;
  }

  #unlink(pending: Pending): void {
    if (pending.prev) pending.prev.next = pending.next;
    else this.#oldest = pending.next;
    if (pending.next) pending.next.prev = pending.prev;
    else this.#newest = pending.prev;
    pending.prev = pending.next = undefined;
  }

  /**
   * One timer at a time, left armed when its request is answered (clearing it is what a timer
   * per request cost): when it fires it fails the overdue and re-arms for the oldest left.
   */
  #arm(ms: number): void {
    this.#timer = setTimeout(() => this.#sweep(), ms);
  }

  #sweep(): void {
    this.#timer = undefined;
    const now = performance.now();
    for (let p = this.#oldest; p && p.deadline <= now + EARLY_MS; p = this.#oldest) {
      p.open = false;
      this.#unlink(p);
      p.expire();
    }
    if (this.#oldest) this.#arm(Math.max(1, Math.ceil(this.#oldest.deadline - now)));
  }
}
