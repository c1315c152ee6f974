/**
 * Redlock's designated master for a key: the masters ranked by a fixed 64-bit hash of key and
 * master address, highest first (rendezvous hashing), the same in every client whatever order
 * it lists the masters in, and the same as the Rust client's (`protocol/src/ranking.rs`; the
 * contract's `vectors.ranking` hold its answers).
 */
const MASK = (1n << 64n) - 1n;

/** FNV-1a over key, 0xff, name, then the SplitMix64 finaliser. */
export function score(key: string, name: string): bigint {
  let h = 0xcbf29ce484222325n;
  for (const byte of [...Buffer.from(key, 'utf8'), 0xff, ...Buffer.from(name, 'utf8')]) {
    h = ((h ^ BigInt(byte)) * 0x100000001b3n) & MASK;
  }
  h ^= h >> 30n;
  h = (h * 0xbf58476d1ce4e5b9n) & MASK;
  h ^= h >> 27n;
  h = (h * 0x94d049bb133111ebn) & MASK;
  return h ^ (h >> 31n);
}

/** The masters' indexes in the order contenders for `key` wait on them. */
export function ranking(key: string, names: readonly string[]): number[] {
  return names
    .map((name, i) => ({ s: score(key, name), name, i }))
    .sort((a, b) => (a.s === b.s ? (a.name < b.name ? -1 : a.name > b.name ? 1 : 0) : a.s > b.s ? -1 : 1))
    .map((entry) => entry.i);
}
