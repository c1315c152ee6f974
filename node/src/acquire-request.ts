/**
 * What an ACQUIRE (or an ACQUIREALL) asks for, its token among it, and the words it is sent as
 * in each engine's form (`engine.ts`): one place that orders the options, so an attempt, a
 * blocking wait and a waiter's attempt on the Functions engine differ only where they must.
 */
import { randomFillSync } from 'node:crypto';

import type { Arg } from './connection.js';
import { request, requestAll, type Engine } from './engine.js';
import { BLOCK, LABEL, PERMITS, SHARED } from './protocol.js';

/** Random bytes in a token: 128 bits. */
export const TOKEN_BYTES = 16;

/**
 * Tokens drawn per refill of `pool`. Each call into the CSPRNG costs microseconds whatever its
 * size (a lease's largest client-side cost when made per token), so it fills 256 tokens at a
 * time, as `crypto.randomUUID` caches its bytes; every token still takes bytes of its own.
 */
const POOL_TOKENS = 256;
const pool = Buffer.alloc(TOKEN_BYTES * POOL_TOKENS);
let drawn = POOL_TOKENS;

/** A new token: 128 random bits, as 32 hex digits. */
export function newToken(): string {
  if (drawn === POOL_TOKENS) {
    randomFillSync(pool);
    drawn = 0;
  }
  const at = TOKEN_BYTES * drawn++;
  return pool.toString('hex', at, at + TOKEN_BYTES);
}

/** What an ACQUIRE asks for besides its key. */
export interface AcquireRequest {
  readonly key: string;
  /** 128 random bits as 32 hex digits: a text argument is one socket write for the clients. */
  readonly token: string;
  readonly ttlMs: number;
  readonly label?: Buffer | string | undefined;
  readonly permits?: number | undefined;
  /** A read lease of a read-write lock (`SHARED`; never with `permits` above 1). */
  readonly shared?: boolean | undefined;
}

/** `req` with a token of its own, for a request after one whose token may be released later. */
export function withNewToken(req: AcquireRequest): AcquireRequest {
  return { ...req, token: newToken() };
}

/** The words after ACQUIRE's key (ACQUIREALL's keys): token, ttl, then the options asked for,
 *  in the Rust client's order (`Acquire::words`, the contract's `acquire_order`): `LABEL`,
 *  `PERMITS` (only above 1), `SHARED`, and `BLOCK` last. */
function acquireTerms(req: Omit<AcquireRequest, 'key'>, blockMs?: number): Arg[] {
  const rest: Arg[] = [req.token, String(req.ttlMs)];
  if (req.label) rest.push(LABEL, req.label);
  if (req.permits !== undefined && req.permits > 1) rest.push(PERMITS, String(req.permits));
  if (req.shared) rest.push(SHARED);
  if (blockMs !== undefined) rest.push(BLOCK, String(blockMs));
  return rest;
}

/** `req` as `engine` takes it; `waiting` names the wake-up list (the Functions forms), `blockMs` waits on the module. */
export function acquireWords(engine: Engine, req: AcquireRequest, waiting: boolean, blockMs?: number): Arg[] {
  return request(engine, 'acquire', req.key, acquireTerms(req, blockMs), waiting);
}

/** One ACQUIREALL of `keys` for `req`'s token and options, as `engine` takes it. */
export function acquireAllWords(engine: Engine, keys: readonly string[], req: Omit<AcquireRequest, 'key'>): Arg[] {
  return requestAll(engine, keys, acquireTerms(req));
}
