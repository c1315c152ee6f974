/**
 * Errors by kind. Every error this package throws is a `FencedLockError`; its subclass says
 * what happened and `kind` (the Rust client's `Cause`) says why a server did not do what was
 * asked. `isRetryable()` and `isUnavailable()` are derived from them in one place, so they
 * never disagree. No error ever carries a lease token.
 */
import { BAD_REQUESTS, CAUSES, classifyReply, type ReplyErrorKind } from './protocol.js';

/**
 * Why a server did not do what was asked (the Rust client's `Cause`): the names of the
 * contract's `causes`, so a kind the Rust client adds reaches this type at the next build.
 */
export type Cause = (typeof CAUSES)[number]['name'];

const KINDS: ReadonlyMap<Cause, { readonly retryable: boolean; readonly outage: boolean }> = new Map(
  CAUSES.map((k) => [k.name, k]),
);

/** Whether a later attempt may not meet `cause` (timeouts, lost connections, a server not ready). */
export function isRetryableCause(cause: Cause): boolean {
  return KINDS.get(cause)?.retryable ?? false;
}

/** Whether the lock service cannot serve requests now; never a misconfiguration. */
export function isOutageCause(cause: Cause): boolean {
  return KINDS.get(cause)?.outage ?? false;
}

/**
 * One class identity for the ESM and the CommonJS build. Each build defines its own classes,
 * so without this an error (or a `Locker`) made by one would fail `instanceof` against the
 * other's class: an application whose dependencies load both (one `require`s the package, one
 * `import`s it) would miss a `LeaseLostError`. Each branded class's prototype carries its name
 * under a registered symbol, shared by both builds, and `instanceof` asks the prototype chain
 * for that name.
 */
const BRAND = Symbol.for('fencedlock.class');

/** Marks `cls` as the package's class `name` (see `BRAND`). */
export function brand(cls: abstract new (...args: never[]) => object, name: string): void {
  Object.defineProperty(cls.prototype, BRAND, { value: `fencedlock/${name}` });
}

/** `instanceof` by brand: whether `value`'s prototype chain has `cls`'s brand. */
export function isBranded(cls: object, value: unknown): boolean {
  const proto = (cls as { prototype?: object }).prototype;
  const name = proto && Object.prototype.hasOwnProperty.call(proto, BRAND) ? (proto as Record<symbol, unknown>)[BRAND] : undefined;
  if (typeof name !== 'string') return typeof cls === 'function' && Function.prototype[Symbol.hasInstance].call(cls, value);
  for (let p: unknown = value; typeof p === 'object' && p !== null; p = Object.getPrototypeOf(p)) {
    if (Object.prototype.hasOwnProperty.call(p, BRAND) && (p as Record<symbol, unknown>)[BRAND] === name) return true;
  }
  return false;
}

/** The base class of every error of this package. */
export class FencedLockError extends Error {
  /** `instanceof` across the ESM and CommonJS builds (see `BRAND`), for this class and every subclass. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return isBranded(this, value);
  }
  override name = 'FencedLockError';
  /** Whether another attempt might succeed. */
  isRetryable(): boolean {
    return false;
  }
  /** Whether the lock service could not answer (what a fail-open policy decides on). */
  isUnavailable(): boolean {
    return false;
  }
}

/** An argument or option makes no sense; nothing was sent. */
export class InvalidArgumentError extends FencedLockError {
  override name = 'InvalidArgumentError';
}

/** Another owner holds the lock (after any wait asked for). */
export class ContendedError extends FencedLockError {
  override name = 'ContendedError';
  constructor(readonly key: string) {
    super(`lock ${JSON.stringify(key)} is held by another owner`);
  }
  override isRetryable(): boolean {
    return true;
  }
}

/** Why a lease is considered lost. */
export type LossReason = 'Expired' | 'Refused' | 'RenewFailed';

const LOSS_TEXT: Record<LossReason, string> = {
  Expired: 'validity expired',
  Refused: 'the server no longer holds our token',
  RenewFailed: 'renewal failed',
};

/** The lease is gone: work protected by it must stop. */
export class LeaseLostError extends FencedLockError {
  override name = 'LeaseLostError';
  /** For `RenewFailed`: the renewal's error (also the `cause`, unless `using` set the body's). */
  readonly renewalError: FencedLockError | undefined;
  constructor(readonly key: string, readonly reason: LossReason, options?: { cause?: unknown; renewalError?: FencedLockError | undefined }) {
    super(`lease on ${JSON.stringify(key)} lost: ${LOSS_TEXT[reason]}`, options?.cause === undefined ? undefined : { cause: options.cause });
    this.renewalError = options?.renewalError ?? (options?.cause instanceof FencedLockError && reason === 'RenewFailed' ? options.cause : undefined);
  }
}

/** A server answered with an error, or could not be reached: `kind` says which. */
export class ServerError extends FencedLockError {
  override name = 'ServerError';
  /** The module's refusal by kind, when the server is the module or the library. */
  readonly replyError: ReplyErrorKind | undefined;
  constructor(
    readonly node: string,
    readonly kind: Cause,
    message: string,
    readonly code?: string,
    options?: { cause?: unknown },
  ) {
    super(`${node}: ${message}`, options);
    this.replyError = code === undefined ? undefined : classifyReply(code, message.slice(code.length + 1));
  }
  override isRetryable(): boolean {
    return isRetryableCause(this.kind);
  }
  override isUnavailable(): boolean {
    return this.replyError !== 'WaitInterrupted' && isOutageCause(this.kind);
  }
  /** Whether the request itself was wrong (ttl, token, label, permits out of range). */
  isBadRequest(): boolean {
    return this.replyError !== undefined && BAD_REQUESTS.includes(this.replyError);
  }
}

/**
 * The lock service could not answer: a server unreachable or timed out, loading, out of
 * memory, in its restart grace. A `ServerError` whose `isUnavailable()` is true.
 */
export class UnavailableError extends ServerError {
  override name = 'UnavailableError';
}

/** Neither engine: no module, and the Functions library could not be loaded nor run as a script. */
export class NoEngineError extends ServerError {
  override name = 'NoEngineError';
}

/** A reply that breaks the contract's shape: nothing in it can be trusted. */
export class BadReplyError extends FencedLockError {
  override name = 'BadReplyError';
}

/** One master's answer in a Redlock round. */
export type Vote =
  | { readonly vote: 'granted'; readonly fence: bigint }
  | { readonly vote: 'refused' }
  | { readonly vote: 'failed'; readonly error: FencedLockError }
  | { readonly vote: 'not-awaited' };

/** Redlock did not obtain a usable majority; `votes` says how each master answered. */
export class QuorumNotReachedError extends FencedLockError {
  override name = 'QuorumNotReachedError';
  constructor(readonly key: string, readonly votes: readonly Vote[], readonly quorum: number) {
    super(`quorum of ${quorum} not reached on ${JSON.stringify(key)}: ${votes.map((v) => v.vote).join(', ')}`);
  }
  /** How many masters refused (another owner holds the lock there). */
  refused(): number {
    return this.votes.filter((v) => v.vote === 'refused').length;
  }
  override isRetryable(): boolean {
    const final = this.votes.filter((v) => v.vote === 'failed' && !v.error.isRetryable()).length;
    return this.votes.length - final >= this.quorum;
  }
  /** No majority because masters did not answer, and none refused. */
  override isUnavailable(): boolean {
    return this.refused() === 0 && this.votes.some((v) => v.vote === 'failed' && v.error.isUnavailable());
  }
}

for (const [cls, name] of [
  [FencedLockError, 'FencedLockError'],
  [InvalidArgumentError, 'InvalidArgumentError'],
  [ContendedError, 'ContendedError'],
  [LeaseLostError, 'LeaseLostError'],
  [ServerError, 'ServerError'],
  [UnavailableError, 'UnavailableError'],
  [NoEngineError, 'NoEngineError'],
  [BadReplyError, 'BadReplyError'],
  [QuorumNotReachedError, 'QuorumNotReachedError'],
] as const) {
  brand(cls, name);
}
