//! Bounds both sides check: the module refuses what breaks them, the client refuses to send it.

/// Longest token, in bytes (the shortest is 1). Tokens are secrets chosen by clients; the bound
/// keeps a lock key small.
pub const MAX_TOKEN_LEN: usize = 512;

/// Longest lease label, in bytes (the shortest is 1). A label is public (`STATUS` shows it to
/// anyone who may read the key); the bound keeps a lock key small.
pub const MAX_LABEL_LEN: usize = 256;

/// Most holders a semaphore key admits (`ACQUIRE … PERMITS n`). Every change to a semaphore
/// replicates all its holders in one record, so the bound keeps that record (and the key) small.
pub const MAX_PERMITS: u32 = 1024;

/// Most keys one `FENCEDLOCK.ACQUIREALL` takes. The keys are decided and written in one
/// command on the server's main thread, and their records replicate together: the bound keeps
/// that step short.
pub const MAX_ACQUIRE_KEYS: usize = 64;

/// Default of the `fencedlock.max-ttl-ms` config: one day. A ttl of years by typo would
/// otherwise lock a job out for good.
pub const DEFAULT_MAX_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// Upper bound of `fencedlock.max-ttl-ms`, about 139 years; keeps deadlines far from overflow.
pub const MAX_MAX_TTL_MS: u64 = 1 << 42;

/// Largest fence the module hands out: Redis integer replies are signed 64-bit.
pub const MAX_FENCE: u64 = i64::MAX as u64;

/// How far a new epoch moves the fence high-water mark when the node's wall clock is behind
/// the mark (see [`crate::epoch`]): a node that missed fewer than `EPOCH_GAP` grants of its
/// predecessor still issues fences above all of them. Also the headroom of a cluster slot's
/// fence floor: one floor write covers the next `EPOCH_GAP` grants of the slot.
pub const EPOCH_GAP: u64 = 1 << 32;

/// Default of the `fencedlock.reclaim-after-ms` config: ten minutes. Long enough that an
/// operator can still read a just-released lock's fence with `STATUS`; short enough that
/// per-entity lock keys (one per invoice, job or user) stay bounded by the keys used in the
/// last ten minutes instead of growing forever.
pub const DEFAULT_RECLAIM_AFTER_MS: u64 = 10 * 60 * 1000;

/// Default of the `fencedlock.restart-grace-ms` config: no grace (a server whose last writes
/// survive a crash, with `appendfsync always`, needs none).
pub const DEFAULT_RESTART_GRACE_MS: u64 = 0;

/// Longest `BLOCK` timeout of `FENCEDLOCK.ACQUIRE`, in ms (the same bound as ttls, far from
/// overflow); `0` means no limit.
pub const MAX_BLOCK_MS: u64 = MAX_MAX_TTL_MS;
