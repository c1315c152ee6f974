/**
 * What a failed request was, as the Rust client reads it (`Cause::of`): no answer within its
 * bound (`TimedOut`, from `bounded`), or the server's error reply, classified by its code;
 * which failures a reload cures (a lost script or library); and the package's error for it,
 * naming the server and never showing the token.
 */
import { ConnectionFailure, ErrorReply, LossyInteger, UnexpectedReply, type Arg } from './connection.js';
import { LIBRARY, SCRIPT } from './engine.js';
import { BadReplyError, NoEngineError, ServerError, UnavailableError, isOutageCause, type Cause } from './errors.js';
import { CAUSES, classifyReply } from './protocol.js';

/** The request got no answer within its bound. */
export class TimedOut extends ConnectionFailure {}

/** `promise`, or a `TimedOut` after `ms` (the request is not cancelled: its reply is ignored). */
export function bounded<T>(promise: Promise<T>, ms: number): Promise<T> {
  // One promise and one timer per request (every lease sends two), not race's and finally's.
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new TimedOut(`no answer within ${ms} ms`)), ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err);
      },
    );
  });
}

/** The `Cause` of an error reply or a failed request (the Rust client's `Cause::of`). */
export function causeOf(err: unknown): Cause {
  if (err instanceof TimedOut) return 'TimedOut';
  if (!(err instanceof ErrorReply)) return 'Unreachable';
  if (err.code === 'ERR') {
    const detail = err.line.slice(err.code.length + 1);
    return ERR_DETAILS.find(([start]) => detail.startsWith(start))?.[1] ?? 'Other';
  }
  return BY_CODE.get(err.code) ?? 'Other';
}

/** The cause each error code names: the servers' codes and this client's own (`NOENGINE`). */
const BY_CODE: ReadonlyMap<string, Cause> = new Map(
  CAUSES.flatMap((k) => [...(k.codes as readonly string[]), ...(k.client_codes as readonly string[])].map((code) => [code, k.name] as const)),
);

/** The starts of an `ERR` reply's detail that name a cause ("unknown command": no module). */
const ERR_DETAILS: readonly (readonly [string, Cause])[] = CAUSES.flatMap((k) =>
  (k.err_details as readonly string[]).map((start) => [start, k.name] as const),
);

/** The load that cures `err`: the script after `NOSCRIPT`, the library after "Function not found". */
export function lost(err: unknown): Arg[] | undefined {
  if (!(err instanceof ErrorReply)) return undefined;
  if (err.code === 'NOSCRIPT') return ['SCRIPT', 'LOAD', SCRIPT];
  if (err.line.startsWith('ERR Function not found')) return ['FUNCTION', 'LOAD', 'REPLACE', LIBRARY];
  return undefined;
}

/** Whether `err` is an answer of the server (the connection is in step). */
export function answered(err: unknown): boolean {
  return err instanceof ErrorReply;
}

/** Replaces every occurrence of `secret` in `text`: a server without the module echoes arguments. */
function redact(text: string, secret: string | undefined): string {
  const out = text.replace(/, with args beginning with: .*$/, ', with args beginning with: <redacted>');
  return secret ? out.split(secret).join('<token>') : out;
}

/** A failed request to `server` as this package's error, naming the server; `secret` never shows. */
export function errorOf(server: string, err: unknown, secret?: string): Error {
  if (err instanceof ServerError || err instanceof BadReplyError) return err;
  if (err instanceof LossyInteger || err instanceof UnexpectedReply) return new BadReplyError(`${server}: ${err.message}`, { cause: err });
  const cause = causeOf(err);
  const text = redact(err instanceof Error ? err.message : String(err), secret);
  const code = err instanceof ErrorReply ? err.code : undefined;
  if (cause === 'NoEngine') return new NoEngineError(server, cause, text, code);
  // An interrupted wait (`WaitInterrupted`) is an answer to ask again on, not an outage.
  const interrupted = err instanceof ErrorReply && classifyReply(err.code, err.line.slice(err.code.length + 1)) === 'WaitInterrupted';
  const Kind = isOutageCause(cause) && !interrupted ? UnavailableError : ServerError;
  return new Kind(server, cause, text, code, { cause: err });
}
