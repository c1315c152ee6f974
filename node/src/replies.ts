/**
 * The server's replies read into values: integers, fences, and what `STATUS` says of a key
 * (either shape: a lock's, or a semaphore's and read leases' with a list of holders). A reply
 * of another shape is a `BadReplyError`, never a guess.
 */
import type { Reply } from './connection.js';
import { BadReplyError } from './errors.js';
import { MAX_LABEL_LEN, MAX_PERMITS, SHARED_PERMITS } from './protocol.js';

/** One holder of a semaphore key, as `STATUS` shows it. */
export interface PermitStatus {
  readonly fence: bigint;
  readonly remainingMs: number;
  readonly label: Buffer | null;
}

/**
 * What `STATUS` says of a key: never a token. A mutex key (a write lease) shows as one permit;
 * a key held by read leases (`ReadWriteLock`) as `permits` 0 (`SHARED_PERMITS`), `shared`.
 */
export interface KeyStatus {
  readonly fence: bigint;
  /** How many holders the key admits at once; 0 for read leases (up to `MAX_PERMITS` readers). */
  readonly permits: number;
  /** Whether read leases hold the key (`permits` is 0). */
  readonly shared: boolean;
  /** The unexpired holders, oldest grant (lowest fence) first. */
  readonly holders: readonly PermitStatus[];
}

export function asInteger(reply: Reply, what: string): bigint {
  if (typeof reply !== 'bigint') throw new BadReplyError(`${what} must reply an integer`);
  return reply;
}

export function asFence(reply: Reply, what: string): bigint | null {
  if (reply === null) return null;
  const fence = asInteger(reply, what);
  if (fence < 1n) throw new BadReplyError(`${what} replied a fence below 1`);
  return fence;
}

/** A label of a `STATUS` reply: nil, or 1 to `MAX_LABEL_LEN` bytes. */
function asLabel(reply: Reply | undefined): Buffer | null {
  const label = reply ?? null;
  if (label !== null && !Buffer.isBuffer(label)) throw new BadReplyError('a STATUS label is a string');
  if (label !== null && (label.length === 0 || label.length > MAX_LABEL_LEN)) throw new BadReplyError('a STATUS label has 1 to MAX_LABEL_LEN bytes');
  return label;
}

/**
 * Decodes a `STATUS` reply of either shape; `null` for a key without lock state. Every rule of
 * the shape is checked, as the Rust and Python clients check it: a positive fence; a lock's
 * `held` 0 (pttl -1, no label) or 1 (a pttl of 0 or more); a semaphore's permits 1 to
 * `MAX_PERMITS` (0 for read leases) and one entry per holder, within them, each with a fence
 * above the one before and up to the key's, and a pttl of 0 or more; labels of 1 to
 * `MAX_LABEL_LEN` bytes.
 */
export function decodeStatus(reply: Reply): KeyStatus | null {
  if (reply === null) return null;
  if (!Array.isArray(reply) || reply.length < 3 || reply.length > 4) throw new BadReplyError('STATUS must reply an array of 3 or 4');
  const [f, second, third, fourth] = reply;
  const fence = asFence(f ?? null, 'STATUS');
  if (fence === null) throw new BadReplyError('STATUS must reply a fence');
  const n = Number(asInteger(second ?? null, 'STATUS'));
  const m = asInteger(third ?? null, 'STATUS');
  if (Array.isArray(fourth)) {
    let previous = 0n;
    const holders = fourth.map((h) => {
      if (!Array.isArray(h) || h.length !== 3) throw new BadReplyError('a STATUS holder is [fence, pttl, label]');
      const holder = asInteger(h[0] ?? null, 'STATUS');
      if (holder <= previous || holder > fence) throw new BadReplyError("STATUS holders' fences increase, up to the key's");
      previous = holder;
      const pttl = asInteger(h[1] ?? null, 'STATUS');
      if (pttl < 0n) throw new BadReplyError('a STATUS holder has a pttl');
      return { fence: holder, remainingMs: Number(pttl), label: asLabel(h[2]) };
    });
    const permits = Number(m);
    const shared = permits === SHARED_PERMITS;
    if (!shared && !(permits >= 1 && permits <= MAX_PERMITS)) throw new BadReplyError('STATUS permits must be 1 to MAX_PERMITS, or 0 for read leases');
    if (holders.length !== n || n > (shared ? MAX_PERMITS : permits)) throw new BadReplyError('STATUS holders disagree with its counts');
    return { fence, permits, shared, holders };
  }
  if (n === 0) {
    if (m !== -1n || fourth !== undefined) throw new BadReplyError('a free lock has pttl -1 and no label');
    return { fence, permits: 1, shared: false, holders: [] };
  }
  if (n !== 1 || m < 0n) throw new BadReplyError('held must be 0 or 1, with a pttl');
  return { fence, permits: 1, shared: false, holders: [{ fence, remainingMs: Number(m), label: asLabel(fourth) }] };
}

/**
 * How long until a new holder fits by the leases' expiry alone: zero for a free key or a
 * semaphore with a free permit, else the time left on the lease that ends first (for readers:
 * the first a waiting writer is woken at, by its release or expiry).
 */
export function heldForMs(status: KeyStatus | null): number {
  if (!status || status.holders.length === 0 || (!status.shared && status.holders.length < status.permits)) return 0;
  return Math.min(...status.holders.map((h) => h.remainingMs));
}
