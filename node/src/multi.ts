/**
 * Several keys at once, all or none: `acquireAll` / `tryAcquireAll` hand back `Leases`, a lease
 * with its own fence on every key, or throw and hold none of them. After the Rust client's
 * `primitives/multi.rs`:
 *
 * - **In one command where the server can.** A `Locker` on one server takes the whole set in
 *   one command, for one token, where its module serves `FENCEDLOCK.ACQUIREALL` (asked with
 *   `COMMAND INFO` first; on a Redis Cluster, keys of one slot), or where it runs the Functions
 *   library (`FCALL fencedlock_acquireall`, version 7 on) or the library's script (`EVALSHA`)
 *   and the keys are of one slot (hash tags), which the library needs on any server: every
 *   key or none, so no other client ever sees part of the set held. The command never waits:
 *   the call sends it again with backoff until the wait runs out, holding nothing in between,
 *   and with the same token, so an attempt whose reply was lost is re-entered with the same
 *   fences.
 * - **Key by key elsewhere** (Redlock, keys of several slots on the library or on a cluster,
 *   more than `MAX_ACQUIRE_KEYS` keys, a module older than `ACQUIREALL`): in the keys' byte
 *   order whatever order they were named in, so callers naming overlapping sets in different
 *   orders never wait for each other; a key refused releases every key taken before the call
 *   throws; a lease that aged more than a quarter of its validity while later keys were
 *   awaited is renewed before the call returns.
 */
import { inspect } from 'node:util';

import { InvalidArgumentError, brand, isBranded } from './errors.js';
import type { Lease } from './lease.js';
import { checkKey, drift, type Settings } from './options.js';
import type { Server } from './server.js';

/** A lease on each of several keys, taken together; iterates in the order the keys were named. */
export class Leases implements Iterable<Lease> {
  /** `instanceof` across the ESM and CommonJS builds (see `brand` in errors.ts). */
  static [Symbol.hasInstance](value: unknown): boolean {
    return isBranded(this, value);
  }

  readonly #leases: readonly Lease[];

  /** @internal Made by `acquireAll` and `tryAcquireAll`. */
  constructor(leases: readonly Lease[]) {
    this.#leases = leases;
  }

  /** How many leases (keys) the set holds. */
  get size(): number {
    return this.#leases.length;
  }

  /** The keys, in the order they were named. */
  get keys(): string[] {
    return this.#leases.map((lease) => lease.key);
  }

  /** The lease on `key`; undefined for a key not in the set. */
  get(key: string): Lease | undefined {
    return this.#leases.find((lease) => lease.key === key);
  }

  /** The leases, in the order the keys were named. */
  [Symbol.iterator](): Iterator<Lease> {
    return this.#leases[Symbol.iterator]();
  }

  /** The leases as an array (to keep alive or release one by one). */
  toArray(): Lease[] {
    return [...this.#leases];
  }

  /** Whether every lease has validity left. */
  isValid(): boolean {
    return this.#leases.every((lease) => lease.isValid());
  }

  /** Throws `LeaseLostError` as soon as any of the leases ran out of validity. */
  ensureValid(): void {
    for (const lease of this.#leases) lease.ensureValid();
  }

  /**
   * Releases every lease: true if each was still held, false if any had expired or been taken
   * over. Every release is sent even if one fails; the first failure is thrown after all ended.
   */
  async release(): Promise<boolean> {
    const outcomes = await Promise.allSettled(this.#leases.map((lease) => lease.release()));
    let held = true;
    for (const outcome of outcomes) {
      if (outcome.status === 'rejected') throw outcome.reason;
      held = held && outcome.value;
    }
    return held;
  }

  toJSON(): { key: string; fence: string; remaining: number }[] {
    return this.#leases.map((lease) => lease.toJSON());
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return `Leases [ ${this.#leases.map((lease) => inspect(lease)).join(', ')} ]`;
  }
}

/**
 * The positions of `keys` in the order every caller takes them key by key (by the keys' UTF-8
 * bytes, as the Rust and Python clients order them); throws `InvalidArgumentError`, before
 * anything is sent, for no keys, a bad key or a key named twice.
 */
export function canonicalOrder(keys: unknown): number[] {
  if (!Array.isArray(keys)) throw new InvalidArgumentError(`acquireAll takes an array of keys, got ${typeof keys}`);
  const list: readonly unknown[] = keys;
  if (list.length === 0) throw new InvalidArgumentError('acquireAll needs at least one key');
  const bytes = list.map((key) => Buffer.from(checkKey(key), 'utf8'));
  const seen = new Set<string>();
  for (const [i, b] of bytes.entries()) {
    const id = b.toString('hex');
    if (seen.has(id)) throw new InvalidArgumentError(`acquireAll: the key ${JSON.stringify(list[i])} is named twice (one lease per key)`);
    seen.add(id);
  }
  return bytes.map((_, i) => i).sort((a, b) => Buffer.compare(bytes[a] ?? Buffer.alloc(0), bytes[b] ?? Buffer.alloc(0)));
}

/**
 * The key of a refused set to name in the error: the first one (in the order named) that
 * `STATUS` shows held now, or every key, space-separated, when none is (the set was refused
 * for waiters, or freed since).
 */
export async function busyKey(server: Server, keys: readonly string[]): Promise<string> {
  for (const key of keys) {
    const status = await server.status(key).catch(() => null);
    if (status && status.holders.length > 0) return key;
  }
  return keys.join(' ');
}

/** Releases every key of a set that may have been granted to `token` (a release by our token cannot hurt another holder). */
export async function giveBackSet(server: Server, keys: readonly string[], token: string): Promise<void> {
  await Promise.all(keys.map((key) => server.release(key, token).catch(() => false)));
}

/** Releases what was taken of a key-by-key acquisition that failed (what is not released expires after its ttl). */
export async function giveBack(taken: readonly (Lease | undefined)[]): Promise<void> {
  await Promise.all(taken.map((lease) => lease?.release().catch(() => false)));
}

/**
 * Renews each lease that used more than a quarter of its validity while later keys were
 * taken, so that all of them are good for most of a ttl on return. Throws the renewal's error
 * (`LeaseLostError` for a lease lost meanwhile).
 */
export async function refresh(leases: readonly Lease[], settings: Settings): Promise<void> {
  for (const lease of leases) {
    const window = lease.ttl - drift(settings, lease.ttl);
    if (lease.remaining() < window - window / 4) await lease.renew();
  }
}
brand(Leases, 'Leases');
