/**
 * A locker's waiting step (`take` in `locker.ts`): on one server, the server's own wait
 * (`Server.acquireWaiting`), its grant re-anchored when the wait ate into the lease; on a
 * Redlock, a reservation queued on the key's designated master, then the majority taken in
 * ordinary rounds. Its outcome is a grant, null when the wait ran out, or `Again`: back off
 * and retry, with a new token.
 */
import { setTimeout as sleep } from 'node:timers/promises';

import { withNewToken, type AcquireRequest } from './acquire-request.js';
import { mayHold, type Core, type Grant, type Won } from './core.js';
import { FencedLockError, ServerError } from './errors.js';
import { drift } from './options.js';
import { ranking } from './ranking.js';

/** How a Redlock waiter checks that the master it waits on still answers. */
const WATCH_EVERY_MS = 1000;

/**
 * A round to retry after a backoff (with a new token: the last may be released later), and
 * why: the last attempt's error, or undefined when it was refused (held elsewhere). When the
 * wait runs out, that is the outcome.
 */
export interface Again {
  readonly again: true;
  readonly error: FencedLockError | undefined;
}

export function isAgain(value: Won | Again): value is Again {
  return 'again' in value;
}

export type { Won };

/** `grant`, made to `req`'s token. */
function won(req: AcquireRequest, grant: Grant): Won {
  return { fence: grant.fence, validUntil: grant.validUntil, token: req.token };
}

export function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('aborted', 'AbortError');
}

function asLockError(err: Error): FencedLockError {
  return err instanceof FencedLockError ? err : new FencedLockError(err.message, { cause: err });
}

/**
 * One waiting step: a grant (and the token it went to), null when the wait ran out, or
 * `Again` to back off and retry (with a new token: this one may be released later).
 */
export async function waitTurn(core: Core, req: AcquireRequest, until: number, signal: AbortSignal | undefined): Promise<Won | null | Again> {
  const servers = core.servers;
  if (servers.length === 1 && servers[0]) {
    const server = servers[0];
    if (server.engine === undefined) await server.detect();
    const sent = performance.now();
    let fence: bigint | null;
    try {
      fence = await server.acquireWaiting(req, until, signal);
    } catch (err) {
      if (mayHold(err)) core.releaseAfterWait(server, req.key, req.token);
      if (err instanceof ServerError && err.replyError === 'WaitInterrupted') return { again: true, error: err };
      throw err;
    }
    if (fence === null) return null;
    return won(req, await anchor(core, req, fence, sent));
  }
  return reserve(core, req, until, signal);
}

/** The grant of a wait sent at `sent`, re-anchored by a RENEW if the wait ate over a quarter of the lease. */
async function anchor(core: Core, req: AcquireRequest, fence: bigint, sent: number): Promise<Grant> {
  const window = req.ttlMs - drift(core.settings, req.ttlMs);
  const grant = { fence, validUntil: core.deadline(sent, req.ttlMs) };
  if (performance.now() - sent <= window / 4) return grant;
  const validUntil = await core.renew(req.key, req.token, req.ttlMs).catch(() => null);
  return validUntil === null ? grant : { fence, validUntil };
}

/**
 * Redlock: queue on the key's designated master (or the next in the ranking) for a
 * reservation, then take the majority in ordinary rounds, each master given a moment for
 * the previous holder's releases still in flight.
 */
async function reserve(core: Core, req: AcquireRequest, until: number, signal: AbortSignal | undefined): Promise<Won | null | Again> {
  const servers = core.servers;
  const candidates = servers.length - core.quorum + 1;
  // The request asked now. A token that may be released later (a waiting request abandoned,
  // a round given back) is never asked with again: see `take`.
  let ask = req;
  for (const i of ranking(req.key, servers.map((s) => s.name)).slice(0, candidates)) {
    const server = servers[i];
    if (!server) continue;
    const watch = new AbortController();
    const onAbort = (): void => watch.abort();
    signal?.addEventListener('abort', onAbort, { once: true });
    const watchdog = setInterval(() => {
      server.ping().catch((err: unknown) => {
        if (mayHold(err)) watch.abort();
      });
    }, WATCH_EVERY_MS);
    watchdog.unref();
    let reserved: bigint | null;
    try {
      reserved = await server.acquireWaiting(ask, until, watch.signal);
    } catch (err) {
      if (mayHold(err)) {
        core.releaseAfterWait(server, ask.key, ask.token);
        // Those releases may reach this master after the round below re-granted the same
        // token there, leaving the lease on fewer masters than counted: a new token.
        ask = withNewToken(ask);
      }
      if (signal?.aborted) throw abortError(signal);
      continue; // this master cannot queue us: the next in the ranking
    } finally {
      clearInterval(watchdog);
      signal?.removeEventListener('abort', onAbort);
    }
    if (reserved === null) return core.attempt(ask);
    // Reserved: the round, retried while the previous holder's releases may be in flight.
    // A round that fails gives its token back (the reservation with it), in part in the
    // background: each retry asks with a new token, which those releases cannot reach.
    const settleBy = performance.now() + core.settings.timeout;
    // The last round's error; undefined when it was refused (held elsewhere).
    let failure: FencedLockError | undefined;
    for (;;) {
      const grant = await core.attempt(ask).then(
        (g) => ((failure = undefined), g),
        (err: unknown) => ((failure = err instanceof FencedLockError ? err : asLockError(server.error(err))), null),
      );
      if (grant) return grant;
      if (performance.now() >= settleBy) break;
      await sleep(core.settings.timeout / 10);
      ask = withNewToken(ask);
    }
    core.releaseInBackground(ask.key, ask.token);
    return { again: true, error: failure };
  }
  return core.attempt(ask);
}
