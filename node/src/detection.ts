/**
 * Which engine a server serves leases with, found by asking it as the Rust client does
 * (`client/src/node/`, `backend.rs`): the module where it knows `FENCEDLOCK.ACQUIRE`, else the
 * Functions library (loaded where missing, older, or of the same version but other code), else
 * the library as a script where `FUNCTION` is denied. And whether the module serves
 * `ACQUIREALL`. Asked through the server's own bounded requests (`Server`).
 */
import { ErrorReply, type Arg, type Backend, type Reply } from './connection.js';
import { LIBRARY, SCRIPT, type Engine, type EngineChoice } from './engine.js';
import { answered, bounded } from './failures.js';
import { ACQUIRE_ALL, COMMANDS, LIBRARY_NAME, LIBRARY_VERSION, VERSION_FUNCTION } from './protocol.js';
import { asInteger } from './replies.js';

/** The server detection asks: its connections, its options, and its `call` (which reloads a lost script or library). */
export interface Asked {
  readonly backend: Backend;
  readonly options: { readonly timeoutMs: number; readonly engine: EngineChoice };
  call(args: readonly Arg[], key?: string): Promise<Reply>;
}

/** The `library_code` of the first library in a `FUNCTION LIST … WITHCODE` reply (a flat
 *  field/value list per library), `undefined` when there is none. */
export function libraryCode(reply: Reply): Buffer | undefined {
  const first = Array.isArray(reply) ? reply[0] : undefined;
  if (!Array.isArray(first)) return undefined;
  for (let i = 0; i + 1 < first.length; i += 2) {
    const name = first[i];
    const value = first[i + 1];
    if (Buffer.isBuffer(name) && name.toString() === 'library_code') return Buffer.isBuffer(value) ? value : undefined;
  }
  return undefined;
}

/** The engine `server` serves leases with, as its options choose it; loads the library or script it needs. */
export async function detectEngine(server: Asked): Promise<Engine> {
  const choice = server.options.engine;
  if (choice === 'module') return 'module';
  if (choice === 'script') {
    await loadScript(server);
    return 'script';
  }
  if (choice === 'auto') {
    let module: boolean;
    try {
      const info = await server.call(['COMMAND', 'INFO', COMMANDS.acquire]);
      module = Array.isArray(info) && info.some((entry) => entry !== null);
    } catch (err) {
      // A server that hides COMMAND runs the module unless it has the library.
      if (!answered(err)) throw err;
      module = (await libraryVersion(server)) === undefined;
    }
    if (module) return 'module';
  }
  try {
    await loadLibrary(server);
    return 'functions';
  } catch (err) {
    if (!answered(err) || choice !== 'auto') throw noEngine(err);
  }
  try {
    await loadScript(server);
    return 'script';
  } catch (err) {
    throw noEngine(err);
  }
}

function noEngine(refusal: unknown): unknown {
  if (!answered(refusal)) return refusal;
  const why = refusal instanceof Error ? refusal.message : String(refusal);
  return new ErrorReply(
    `NOENGINE the fencedlock module is not loaded and the Functions library could not be loaded (${why}); load the module ` +
      '(--loadmodule …/libfencedlock_module.so), or have an administrator load the Functions library ' +
      '(this package carries it: redis-cli -x FUNCTION LOAD REPLACE < node_modules/fencedlock/functions.lua), ' +
      'or allow this user FUNCTION LOAD or SCRIPT LOAD and EVALSHA',
  );
}

/** The server's library version, undefined when it has none. Asked without `call`'s reload:
 *  that would load the library to answer, so a module server that hides COMMAND would look
 *  like one with the library (and get it loaded beside the module). */
async function libraryVersion(server: Asked): Promise<number | undefined> {
  try {
    const reply = await bounded(server.backend.shared().call(['FCALL_RO', VERSION_FUNCTION, '0']), server.options.timeoutMs);
    return Number(asInteger(reply, VERSION_FUNCTION));
  } catch (err) {
    if (answered(err)) return undefined;
    throw err;
  }
}

/** Loads this package's library unless the server has it or a newer one. A library of this
 *  version whose code differs (changed without a version raise) is replaced too. */
async function loadLibrary(server: Asked): Promise<void> {
  const version = await libraryVersion(server);
  if (version !== undefined && version > LIBRARY_VERSION) return;
  if (version === LIBRARY_VERSION && !(await libraryDiffers(server))) return;
  await bounded(server.backend.everywhere(['FUNCTION', 'LOAD', 'REPLACE', LIBRARY]), server.options.timeoutMs);
}

/** Whether the server's library code is other than this package's (`FUNCTION LIST …
 *  WITHCODE`); false when the server will not say (an ACL that denies `FUNCTION LIST`). */
async function libraryDiffers(server: Asked): Promise<boolean> {
  try {
    const code = libraryCode(await server.call(['FUNCTION', 'LIST', 'LIBRARYNAME', LIBRARY_NAME, 'WITHCODE']));
    return code === undefined || !code.equals(Buffer.from(LIBRARY));
  } catch (err) {
    if (answered(err)) return false;
    throw err;
  }
}

async function loadScript(server: Asked): Promise<void> {
  await bounded(server.backend.everywhere(['SCRIPT', 'LOAD', SCRIPT]), server.options.timeoutMs);
}

/** Whether the module on `server` knows `ACQUIREALL` (`COMMAND INFO`); false when the server will not say. */
export async function moduleServesAcquireAll(server: Asked): Promise<boolean> {
  try {
    const info = await server.call(['COMMAND', 'INFO', ACQUIRE_ALL]);
    return Array.isArray(info) && info.some((entry) => entry !== null);
  } catch (err) {
    if (answered(err)) return false;
    throw err;
  }
}
