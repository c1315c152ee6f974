/**
 * The wire contract, restated from the protocol crate (`protocol/src/*.rs`). Every constant
 * here is checked against the crate's source by `test/protocol.test.ts`: change it there first.
 */

/** The module's commands. */
export const COMMANDS = {
  acquire: 'FENCEDLOCK.ACQUIRE',
  renew: 'FENCEDLOCK.RENEW',
  release: 'FENCEDLOCK.RELEASE',
  raise: 'FENCEDLOCK.RAISE',
  cad: 'FENCEDLOCK.CAD',
  status: 'FENCEDLOCK.STATUS',
} as const;

export type CommandName = keyof typeof COMMANDS;

/**
 * The module's one command over several keys (`numkeys key [key ...] token ttl_ms [LABEL l]
 * [PERMITS n | SHARED]`): every key or none, for one token. Not in `COMMANDS`: its keys are
 * counted (it has no one key first), the Functions library serves it only for keys of one
 * slot (`ACQUIRE_ALL_FUNCTION`), and modules older than it do not know it.
 */
export const ACQUIRE_ALL = 'FENCEDLOCK.ACQUIREALL';

/** ACQUIRE's option words. */
export const BLOCK = 'BLOCK';
export const LABEL = 'LABEL';
export const PERMITS = 'PERMITS';
/** A flag (no value): a read lease of a read-write lock. */
export const SHARED = 'SHARED';
/** The permit count `STATUS` shows for a key held by read leases (`ACQUIRE … SHARED`). */
export const SHARED_PERMITS = 0;

/** Limits both sides check (`limits.rs`). */
export const MAX_TOKEN_LEN = 512;
export const MAX_LABEL_LEN = 256;
export const MAX_PERMITS = 1024;
/** The most keys one `ACQUIREALL` takes. */
export const MAX_ACQUIRE_KEYS = 64;
export const DEFAULT_MAX_TTL_MS = 86_400_000;
/** The Functions library's longest ttl (`MAX_TTL_MS` in functions.lua; it has no config). */
export const LIBRARY_MAX_TTL_MS = 86_400_000;
/** `MAX_MAX_TTL_MS`: the most any server can be configured to allow (2^42 ms). */
export const MAX_MAX_TTL_MS = 4_398_046_511_104;
/** `MAX_BLOCK_MS`: the longest `BLOCK` timeout. */
export const MAX_BLOCK_MS = MAX_MAX_TTL_MS;

/** The Functions library (`functions.rs`). */
export const LIBRARY_NAME = 'fencedlock';
export const LIBRARY_VERSION = 7;
export const VERSION_FUNCTION = 'fencedlock_version';
export const FLOOR_KEY_PREFIX = 'fencedlock:fn-floor:{';
export const WAKE_KEY_PREFIX = 'fencedlock:fn-wake:{';
export const WAKE_TTL_MS = 10_000;
export const FLOOR_TAG_LEN = 6;

/** The function serving each command. */
export const FUNCTIONS: Record<CommandName, string> = {
  acquire: 'fencedlock_acquire',
  renew: 'fencedlock_renew',
  release: 'fencedlock_release',
  raise: 'fencedlock_raise',
  cad: 'fencedlock_cad',
  status: 'fencedlock_status',
};

/**
 * The function serving `ACQUIREALL` (library version 7 on): `FCALL fencedlock_acquireall N+1
 * key1 … keyN floor token ttl_ms …`, the keys all of one slot and that slot's floor key last
 * (`call_keys_all`; a key of another slot is refused as a wrong floor key), on any server.
 */
export const ACQUIRE_ALL_FUNCTION = 'fencedlock_acquireall';

/** The keys of `fencedlock_acquireall` for `keys` (all of one slot): the keys in order, then their slot's floor key. */
export function acquireAllKeys(keys: readonly string[]): string[] {
  return keys.length === 0 ? [] : [...keys, floorKey(keys[0] ?? '')];
}

/** Whether a function takes the floor key as its second key (`takes_floor`). */
export function takesFloor(command: CommandName): boolean {
  return command !== 'cad' && command !== 'status';
}

/** Whether a function always takes the wake-up list as its third key (`takes_wake`). */
export function takesWake(command: CommandName): boolean {
  return command === 'release';
}

/** The module's error replies by kind (`error.rs`): the code, and the text that tells it apart. */
export const REPLY_ERRORS = {
  BadTtl: { code: 'ERR', prefix: 'ttl must be a positive integer' },
  TtlTooLarge: { code: 'ERR', prefix: 'ttl exceeds' },
  BadToken: { code: 'ERR', prefix: 'token must be' },
  BadFence: { code: 'ERR', prefix: 'fence must be' },
  BadTimeout: { code: 'ERR', prefix: 'timeout must be' },
  BadLabel: { code: 'ERR', prefix: 'label must be' },
  BadPermits: { code: 'ERR', prefix: 'permits must be' },
  BadKeys: { code: 'ERR', prefix: 'numkeys must be' },
  Syntax: { code: 'ERR', prefix: 'syntax error' },
  PermitsMismatch: { code: 'ERR', prefix: 'permits mismatch' },
  UpgradeRefused: { code: 'ERR', prefix: 'upgrade refused' },
  FencesExhausted: { code: 'ERR', prefix: 'fence space exhausted' },
  RestartGrace: { code: 'TRYAGAIN', prefix: 'fencedlock restart grace' },
  WaitInterrupted: { code: 'TRYAGAIN', prefix: 'fencedlock wait interrupted' },
  WrongType: { code: 'WRONGTYPE', prefix: 'Operation against a key holding the wrong kind of value' },
  InternalCommand: { code: 'ERR', prefix: 'FENCEDLOCK.APPLY is internal' },
  BadRecord: { code: 'ERR', prefix: 'malformed FENCEDLOCK.APPLY record' },
  Internal: { code: 'ERR', prefix: 'fencedlock internal error' },
} as const;

export type ReplyErrorKind = keyof typeof REPLY_ERRORS;

/** The kinds whose request itself was wrong: sending it again cannot succeed. */
export const BAD_REQUESTS: readonly ReplyErrorKind[] = [
  'BadTtl', 'TtlTooLarge', 'BadToken', 'BadFence', 'BadTimeout', 'BadLabel', 'BadPermits', 'BadKeys', 'Syntax',
];

/** The module's error kind of an error reply `code detail`; undefined for anybody else's. */
export function classifyReply(code: string, detail: string): ReplyErrorKind | undefined {
  for (const [kind, { code: c, prefix }] of Object.entries(REPLY_ERRORS)) {
    if (code === c && (kind === 'WrongType' || detail.startsWith(prefix))) {
      return kind as ReplyErrorKind;
    }
  }
  return undefined;
}

const SLOTS = 16384;

/** CRC16-XMODEM, the checksum Redis Cluster hashes keys with. */
function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) {
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
  }
  return crc;
}

/** `CLUSTER KEYSLOT key`, with Redis's hash-tag rule. */
export function keySlot(key: Uint8Array): number {
  const open = key.indexOf(0x7b);
  if (open >= 0) {
    const close = key.indexOf(0x7d, open + 1);
    if (close > open + 1) return crc16(key.subarray(open + 1, close)) % SLOTS;
  }
  return crc16(key) % SLOTS;
}

/** Digit widths of a floor tag: the first two digits 0-7, the other four 0-3. */
const TAG_WIDTHS = [3, 3, 2, 2, 2, 2] as const;

function tagOfBits(bits: number): string {
  let shift = 14;
  let tag = '';
  for (const width of TAG_WIDTHS) {
    shift -= width;
    tag += String((bits >> shift) & ((1 << width) - 1));
  }
  return tag;
}

let tagsBySlot: string[] | undefined;

/**
 * The floor tag of `slot`: the one six-digit string (first two digits 0-7, the rest 0-3) whose
 * own slot is `slot`. The 16,384 such strings map one-to-one onto the slots, so the table is
 * built once by enumerating them.
 */
export function floorTag(slot: number): string {
  if (!tagsBySlot) {
    const table: string[] = new Array<string>(SLOTS);
    for (let bits = 0; bits < SLOTS; bits++) {
      const tag = tagOfBits(bits);
      table[keySlot(Buffer.from(tag, 'latin1'))] = tag;
    }
    tagsBySlot = table;
  }
  return tagsBySlot[slot % SLOTS] ?? '';
}

function bytes(key: string | Uint8Array): Uint8Array {
  return typeof key === 'string' ? Buffer.from(key, 'utf8') : key;
}

/** The floor key of `key`'s slot: `fencedlock:fn-floor:{TAG}`. */
export function floorKey(key: string | Uint8Array): string {
  return `${FLOOR_KEY_PREFIX}${floorTag(keySlot(bytes(key)))}}`;
}

/** The wake-up list of `key` (a string, sent as UTF-8): `fencedlock:fn-wake:{TAG}:key`. */
export function wakeKey(key: string): string {
  return `${WAKE_KEY_PREFIX}${floorTag(keySlot(bytes(key)))}}:${key}`;
}
