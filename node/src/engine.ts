/**
 * Which engine serves the contract on a server, and each request in that engine's form: the
 * module's `FENCEDLOCK.*` commands, the Functions library (`FCALL`), or the same library run
 * as a script (`EVALSHA`) where `FUNCTION` is denied. Detected per server as the Rust client
 * does (`client/src/node/`, `backend.rs`).
 */
import type { Arg } from './connection.js';
import { CONTRACT } from './contract.js';
import { LIBRARY } from './library.js';
import { ACQUIRE_ALL, ACQUIRE_ALL_FUNCTION, COMMANDS, FUNCTIONS, LIBRARY_KEYS, acquireAllKeys, floorKeyOfSlot, slotOfText, wakeKeyOfSlot, type CommandName } from './protocol.js';

/** The engine a server runs the lease commands with. */
export type Engine = 'module' | 'functions' | 'script';

/** Which engine to use: detect it per server (`'auto'`, the default), or insist on one. */
export type EngineChoice = 'auto' | Engine;

/** The library as a script: its source without the `#!lua name=…` line, which `EVAL` refuses. */
export const SCRIPT = LIBRARY.slice(LIBRARY.indexOf('\n') + 1);

/** The SHA1 `EVALSHA` names the script by (the contract's `script_sha1`: the build checks it is
 *  the SHA1 of this script). */
export const SCRIPT_SHA: string = CONTRACT.library.script_sha1;

export { LIBRARY };

/**
 * `command` on `key` with `rest` after it, as `engine` takes it. The Functions forms name the
 * key's floor key where the function takes it, and its wake-up list for a release and for a
 * waiter's ACQUIRE (`waiting`).
 */
export function request(engine: Engine, command: CommandName, key: string, rest: readonly Arg[], waiting = false): Arg[] {
  if (engine === 'module') return [COMMANDS[command], key, ...rest];
  // The key hashed once for both of its slot's keys (a lease's every request comes here).
  const takes = LIBRARY_KEYS[command];
  const wake = waiting || takes.wake;
  if (!wake && !takes.floor) return libraryCall(engine, FUNCTIONS[command], [key], rest);
  const slot = slotOfText(key);
  const keys = wake ? [key, floorKeyOfSlot(slot), wakeKeyOfSlot(slot, key)] : [key, floorKeyOfSlot(slot)];
  return libraryCall(engine, FUNCTIONS[command], keys, rest);
}

/**
 * `ACQUIREALL` of `keys` with `rest` (token, ttl, options) after them, as `engine` takes it:
 * the module's `FENCEDLOCK.ACQUIREALL numkeys key… rest…`, or `fencedlock_acquireall` with
 * the keys and then their slot's floor key (the caller keeps the keys in one slot).
 */
export function requestAll(engine: Engine, keys: readonly string[], rest: readonly Arg[]): Arg[] {
  if (engine === 'module') return [ACQUIRE_ALL, String(keys.length), ...keys, ...rest];
  return libraryCall(engine, ACQUIRE_ALL_FUNCTION, acquireAllKeys(keys), rest);
}

/** `FCALL fn numkeys keys… rest…`, or the script's `EVALSHA`, which takes the function's name first. */
function libraryCall(engine: Engine, fn: string, keys: readonly string[], rest: readonly Arg[]): Arg[] {
  if (engine === 'script') return ['EVALSHA', SCRIPT_SHA, String(keys.length), ...keys, fn, ...rest];
  return ['FCALL', fn, String(keys.length), ...keys, ...rest];
}
