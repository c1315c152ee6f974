/** Lease options and the checks every argument passes before anything is sent. */
import type { EngineChoice } from './engine.js';
import { InvalidArgumentError } from './errors.js';
import { LIBRARY_MAX_TTL_MS, MAX_LABEL_LEN, MAX_MAX_TTL_MS, MAX_PERMITS } from './protocol.js';

/** Options of a `Locker` or `Redlock`; every duration is in milliseconds. */
export interface LockerOptions {
  /** Lease time asked of the servers (whole ms). Default 10,000. */
  readonly ttl?: number;
  /** How long `acquire` waits for a busy lock by default. Default 0: one attempt. */
  readonly wait?: number;
  /** How long one server may take to answer one request. Default 500. */
  readonly timeout?: number;
  /** The clock-drift allowance is `ttl * driftFactor + driftConstant`. Defaults 0.01 and 2. */
  readonly driftFactor?: number;
  readonly driftConstant?: number;
  /** Keep-alive renewal period. Default ttl / 3. */
  readonly renewInterval?: number;
  /** Requests waiting on one server at once, each on a connection of its own. Default 16; 0 polls. */
  readonly maxBlocking?: number;
  /** Which engine the servers serve leases with. Default `'auto'`. */
  readonly engine?: EngineChoice;
}

/** Per-call options of `acquire` and `using`. */
export interface AcquireOptions {
  /** Lease time for this lease (whole ms); the locker's by default. */
  readonly ttl?: number;
  /** How long to wait for a busy lock (ms); the locker's by default. */
  readonly wait?: number;
  /** Aborts a wait (nothing is held afterwards). */
  readonly signal?: AbortSignal;
}

/** Validated options. */
export interface Settings {
  readonly ttl: number;
  readonly wait: number;
  readonly timeout: number;
  readonly driftFactor: number;
  readonly driftConstant: number;
  readonly renewInterval: number | undefined;
  readonly maxBlocking: number;
  readonly engine: EngineChoice;
}

const ENGINES: readonly string[] = ['auto', 'module', 'functions', 'script'];

function bad(message: string): never {
  throw new InvalidArgumentError(message);
}

/**
 * The shortest ttl a locker asks for, in ms. The protocol allows 1 ms, but a lease that short
 * is over before its reply arrives (its validity is the ttl minus the round trip minus drift),
 * and a ttl below it is almost always seconds written where milliseconds are meant (`ttl: 30`).
 */
export const MIN_TTL_MS = 100;

/** `value` as an error message shows it: its value and its type. */
export function shown(value: unknown): string {
  const text = typeof value === 'bigint' ? `${value}n` : typeof value === 'string' ? JSON.stringify(value) : String(value);
  return `${text} (${value === null ? 'null' : typeof value})`;
}

/**
 * A ttl: a whole number of ms from `MIN_TTL_MS` to the largest any server can allow (the
 * module's `fencedlock.max-ttl-ms` may be raised to `MAX_MAX_TTL_MS`; the Functions library's
 * limit, `LIBRARY_MAX_TTL_MS`, is checked once the engine is known: `checkTtlOn`).
 */
export function checkTtl(ttl: unknown): number {
  if (typeof ttl !== 'number' || !Number.isInteger(ttl)) {
    bad(`ttl must be a whole number of milliseconds (a JS number), got ${shown(ttl)}`);
  }
  if (ttl < MIN_TTL_MS) {
    bad(`ttl is in milliseconds and must be at least ${MIN_TTL_MS}, got ${shown(ttl)}${ttl >= 1 && ttl <= 3600 ? ` (did you mean ${ttl * 1000}, ${ttl} seconds?)` : ''}`);
  }
  if (ttl > MAX_MAX_TTL_MS) bad(`ttl must be at most ${MAX_MAX_TTL_MS} ms, got ${shown(ttl)}`);
  return ttl;
}

/**
 * A ttl a server of `engine` takes: on the Functions library (or its script form) at most
 * `LIBRARY_MAX_TTL_MS` (one day), which it cannot be configured past. The module's limit is
 * its `fencedlock.max-ttl-ms` config (one day by default), which the server itself checks.
 */
export function checkTtlOn(engine: string, ttl: number): void {
  if (engine !== 'module' && ttl > LIBRARY_MAX_TTL_MS) {
    bad(`ttl must be at most ${LIBRARY_MAX_TTL_MS} ms (one day) on a server without the module (the Functions library's limit), got ${shown(ttl)}`);
  }
}

/** A wait: a finite number of ms, 0 or more. */
export function checkWait(wait: unknown): number {
  if (typeof wait !== 'number' || !Number.isFinite(wait) || wait < 0) bad(`wait must be a finite number of milliseconds >= 0, got ${shown(wait)}`);
  return wait;
}

/** The drift allowance for `ttl` (ms). */
export function drift(settings: Settings, ttl: number): number {
  return ttl * settings.driftFactor + settings.driftConstant;
}

/** Checks `options` once, so the lock code can rely on them. */
export function settle(options: LockerOptions = {}): Settings {
  const s: Settings = {
    ttl: checkTtl(options.ttl ?? 10_000),
    wait: checkWait(options.wait ?? 0),
    timeout: options.timeout ?? 500,
    driftFactor: options.driftFactor ?? 0.01,
    driftConstant: options.driftConstant ?? 2,
    renewInterval: options.renewInterval,
    maxBlocking: options.maxBlocking ?? 16,
    engine: options.engine ?? 'auto',
  };
  if (!Number.isFinite(s.timeout) || s.timeout <= 0) bad(`timeout must be a positive number of milliseconds, got ${s.timeout}`);
  if (!(s.driftFactor >= 0 && s.driftFactor < 1)) bad(`driftFactor must be in [0, 1), got ${s.driftFactor}`);
  if (!(s.driftConstant >= 0)) bad(`driftConstant must be >= 0, got ${s.driftConstant}`);
  if (drift(s, s.ttl) >= s.ttl) bad(`the drift allowance leaves no validity in a ${s.ttl} ms ttl`);
  if (!Number.isInteger(s.maxBlocking) || s.maxBlocking < 0) bad(`maxBlocking must be a whole number >= 0, got ${s.maxBlocking}`);
  if (!ENGINES.includes(s.engine)) bad(`engine must be one of ${ENGINES.join(', ')}, got ${String(s.engine)}`);
  if (s.renewInterval !== undefined && !(s.renewInterval > 0 && s.renewInterval < s.ttl - drift(s, s.ttl))) {
    bad(`renewInterval must be positive and shorter than ttl minus drift, got ${s.renewInterval}`);
  }
  return s;
}

/**
 * A lock key as bytes. Empty, blank and control-character keys are refused before any
 * request: they are typos, and a key nobody can type again cannot be inspected or released.
 */
export function checkKey(key: unknown): string {
  if (typeof key !== 'string') bad(`a key must be a string, got ${typeof key}`);
  if (key.trim().length === 0) bad('a key must not be empty or blank');
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f]/.test(key)) bad(`a key must not contain control characters: ${JSON.stringify(key)}`);
  return key;
}

/** A label: 1 to MAX_LABEL_LEN bytes (public: STATUS shows it). */
export function checkLabel(label: unknown): Buffer | string {
  const length = typeof label === 'string' ? Buffer.byteLength(label, 'utf8') : Buffer.isBuffer(label) ? label.length : bad('a label must be a string or a Buffer');
  if (length < 1 || length > MAX_LABEL_LEN) bad(`a label must be 1 to ${MAX_LABEL_LEN} bytes, got ${length}`);
  return label as Buffer | string;
}

/** A permit count: 1 to MAX_PERMITS. */
export function checkPermits(permits: unknown): number {
  if (typeof permits !== 'number' || !Number.isInteger(permits) || permits < 1 || permits > MAX_PERMITS) {
    bad(`a semaphore has 1 to ${MAX_PERMITS} permits, got ${String(permits)}`);
  }
  return permits;
}
