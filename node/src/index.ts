/**
 * fencedlock for Node.js: leases with fencing tokens on Redis / Valkey (the fencedlock module,
 * or its Functions library where modules cannot load), over your own ioredis or node-redis
 * client. Fences are `bigint`: they exceed 2^53.
 */
export { Locker, Redlock, type RedisClient } from './locker.js';
export { TOKEN_BYTES } from './acquire-request.js';
export { Lease } from './lease.js';
export { Leases } from './multi.js';
export { Semaphore } from './semaphore.js';
export { ReadWriteLock } from './read-write.js';
export { Election, Leadership, MIN_CAMPAIGN_WINDOW_MS, type Leader } from './election.js';
export type { AcquireOptions, LockerOptions } from './options.js';
export type { Engine, EngineChoice } from './engine.js';
export type { KeyStatus, PermitStatus } from './replies.js';
export {
  BadReplyError,
  ContendedError,
  FencedLockError,
  InvalidArgumentError,
  LeaseLostError,
  NoEngineError,
  QuorumNotReachedError,
  ServerError,
  UnavailableError,
  type Cause,
  type LossReason,
  type Vote,
} from './errors.js';
export { LIBRARY_VERSION, MAX_ACQUIRE_KEYS, MAX_LABEL_LEN, MAX_PERMITS, MAX_TOKEN_LEN, SHARED_PERMITS, floorKey, wakeKey, type ReplyErrorKind } from './protocol.js';
