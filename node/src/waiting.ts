/**
 * An ACQUIRE that waits, on a connection of its own (from the server's `Pool`): on the module
 * `ACQUIRE … BLOCK`, queued on the server; on the Functions engine, which cannot block,
 * attempts, each refused one followed by a `BLPOP` on the key's wake-up list for as long as
 * `STATUS` shows the holders' leases to last (`client/src/node/wake.rs`).
 */
import type { Arg, Backend, DedicatedConnection, Reply } from './connection.js';
import { acquireWords, type AcquireRequest } from './acquire-request.js';
import { request, type Engine } from './engine.js';
import { BadReplyError } from './errors.js';
import { TimedOut, bounded, lost } from './failures.js';
import { MAX_BLOCK_MS, wakeKey } from './protocol.js';
import { asFence, decodeStatus, heldForMs } from './replies.js';

/** A wait's outcome on one server: the fence, or null when the wait ran out first. */
export type WaitAnswer = bigint | null;

/** What a wait runs with besides its connection: the server's engine, its backend (where a
 *  lost script or library is loaded again), and the per-request timeout. */
export interface WaitSetting {
  readonly engine: Engine;
  readonly backend: Backend;
  readonly timeoutMs: number;
}

/** `req` waited for on `conn` until `until` (`performance.now()` ms) at most, as the engine waits. */
export function waitOn(conn: DedicatedConnection, setting: WaitSetting, req: AcquireRequest, until: number, signal?: AbortSignal): Promise<WaitAnswer> {
  return setting.engine === 'module' ? blocked(conn, setting, req, until, signal) : woken(conn, setting, req, until, signal);
}

/** `request` on `conn` until it answers, `ms` passes or `signal` aborts. */
async function on(conn: DedicatedConnection, args: readonly Arg[], key: string, ms: number, signal?: AbortSignal): Promise<Reply> {
  if (signal?.aborted) throw new TimedOut('abandoned');
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(new TimedOut('abandoned'));
    signal?.addEventListener('abort', onAbort, { once: true });
  });
  try {
    return await Promise.race([bounded(conn.call(args, key), ms), aborted]);
  } finally {
    if (onAbort) signal?.removeEventListener('abort', onAbort);
  }
}

async function blocked(conn: DedicatedConnection, setting: WaitSetting, req: AcquireRequest, until: number, signal?: AbortSignal): Promise<WaitAnswer> {
  const left = Math.max(0, until - performance.now());
  // BLOCK 0 would wait without limit: a wait with nothing left is one attempt of 1 ms.
  const blockMs = Math.min(MAX_BLOCK_MS, Math.max(1, Math.ceil(left)));
  const words = acquireWords(setting.engine, req, false, blockMs);
  return asFence(await on(conn, words, req.key, blockMs + setting.timeoutMs, signal), 'ACQUIRE');
}

/** Waiting where the server cannot block: attempts, woken by the key's wake-up list. */
async function woken(conn: DedicatedConnection, setting: WaitSetting, req: AcquireRequest, until: number, signal?: AbortSignal): Promise<WaitAnswer> {
  const { engine, timeoutMs: timeout } = setting;
  const attempt = acquireWords(engine, req, false);
  const registering = acquireWords(engine, req, true);
  const status = request(engine, 'status', req.key, []);
  const send = async (args: readonly Arg[], ms = timeout): Promise<Reply> => {
    try {
      return await on(conn, args, req.key, ms, signal);
    } catch (err) {
      const reload = lost(err);
      if (!reload) throw err;
      await bounded(setting.backend.everywhere(reload), timeout);
      return on(conn, args, req.key, ms, signal);
    }
  };
  let fence = asFence(await send(attempt), 'ACQUIRE');
  for (;;) {
    if (fence !== null) return fence;
    const left = until - performance.now();
    if (left <= 0) return null;
    let heldFor = 0;
    try {
      heldFor = heldForMs(decodeStatus(await send(status)));
    } catch (err) {
      if (!(err instanceof BadReplyError)) throw err;
    }
    fence = asFence(await send(registering), 'ACQUIRE');
    if (fence !== null) return fence;
    const nap = Math.min(Math.max(heldFor + 1, 5), left);
    const napMs = Math.max(1, Math.ceil(nap));
    const seconds = `${Math.floor(napMs / 1000)}.${String(napMs % 1000).padStart(3, '0')}`;
    await send(['BLPOP', wakeKey(req.key), seconds], napMs + timeout);
    // The attempt after a wake-up names the wake-up list too: a reader granted then passes
    // the wake-up on to the readers waiting behind it (a release wakes one).
    fence = asFence(await send(registering), 'ACQUIRE');
  }
}
