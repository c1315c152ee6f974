//! Every `FENCEDLOCK.*` command's name and arguments. The module registers, documents and
//! arity-checks commands from these; clients build requests from them.
//!
//! Every command but `ACQUIREALL` takes exactly one key, as its first argument; `ACQUIREALL`
//! takes its keys after their count, first (as `EVAL` does). Either way Redis Cluster routing,
//! `COMMAND GETKEYS` and ACL key patterns see every key.

use std::ffi::CStr;

use crate::limits::{MAX_LABEL_LEN, MAX_PERMITS, MAX_TOKEN_LEN};

/// What an argument holds, for `COMMAND DOCS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    /// The lock key.
    Key,
    /// `numkeys key [key ...]`: a count, then that many lock keys (at least one).
    Keys,
    /// Opaque bytes (a token, a value, a label).
    Text,
    /// A decimal integer.
    Integer,
    /// No value: the option's word alone (`SHARED`), like `SET`'s `NX`.
    Flag,
}

/// One argument of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arg {
    /// Its name in `COMMAND DOCS`.
    pub name: &'static str,
    /// What it holds.
    pub kind: ArgKind,
}

/// A named option: `word value`, the word matched case-insensitively (like `SET`'s `PX ms`), or
/// the word alone when its value's kind is [`ArgKind::Flag`] (like `SET`'s `NX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opt {
    /// The word, e.g. `BLOCK`.
    pub word: &'static str,
    /// The value after it ([`ArgKind::Flag`]: none; the word is the whole option).
    pub value: Arg,
}

impl Opt {
    /// How many words the option takes: its word, and its value unless it is a flag.
    pub const fn width(&self) -> usize {
        match self.value.kind {
            ArgKind::Flag => 1,
            _ => 2,
        }
    }
}

/// A command's shape: name, arguments and a one-line summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command {
    /// The name as sent, e.g. `FENCEDLOCK.ACQUIRE`.
    pub name: &'static str,
    /// The same name NUL-terminated, for the module's C calls (replication on the hot path).
    pub c_name: &'static CStr,
    /// The arguments every call has, the key first.
    pub args: &'static [Arg],
    /// Positional groups after `args`, each present only if every group before it is:
    /// `[a b [c]]` is `&[&[a, b], &[c]]`.
    pub optional: &'static [&'static [Arg]],
    /// Named options after `args`, in any order, each at most once.
    pub options: &'static [Opt],
    /// What it does, for `COMMAND DOCS`.
    pub summary: &'static str,
}

impl Command {
    /// Whether the command takes several keys after their count ([`ArgKind::Keys`]).
    pub const fn counts_keys(&self) -> bool {
        let mut i = 0;
        while i < self.args.len() {
            if matches!(self.args[i].kind, ArgKind::Keys) {
                return true;
            }
            i += 1;
        }
        false
    }

    /// The fewest words a call has, the name included (`numkeys key` is two).
    const fn required(&self) -> usize {
        1 + self.args.len() + if self.counts_keys() { 1 } else { 0 }
    }

    /// Redis arity: the argument count including the name, negative for "at least".
    pub const fn arity(&self) -> i32 {
        let required = self.required() as i32;
        if self.optional.is_empty() && self.options.is_empty() && !self.counts_keys() {
            required
        } else {
            -required
        }
    }

    /// Whether a call with `argc` arguments (the name included) has this command's shape: the
    /// count alone (which options, and whether one repeats, is the parser's to check; so is
    /// whether `numkeys` matches the keys, for a command that counts them).
    pub const fn accepts(&self, argc: usize) -> bool {
        let required = self.required();
        if argc < required {
            return false;
        }
        if self.counts_keys() {
            return true;
        }
        let extra = argc - required;
        let (mut widest, mut flags, mut i) = (0, 0, 0);
        while i < self.options.len() {
            widest += self.options[i].width();
            flags += 2 - self.options[i].width();
            i += 1;
        }
        // Valued options come in pairs; a flag makes an odd count possible.
        if extra <= widest && (extra % 2 == 0 || flags > 0) {
            return true;
        }
        let (mut group, mut len) = (0, 0);
        while group < self.optional.len() {
            len += self.optional[group].len();
            if extra == len {
                return true;
            }
            group += 1;
        }
        false
    }
}

/// `"name"` as a `&CStr`, checked at compile time.
macro_rules! c_name {
    ($name:literal) => {
        match CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()) {
            Ok(name) => name,
            Err(_) => panic!("a command name has no NUL byte"),
        }
    };
}

macro_rules! command {
    (@or $given:expr) => { $given };
    (@or) => { &[] };
    ($(#[$doc:meta])* $ident:ident = $name:literal, args: $args:expr, $(optional: $optional:expr,)? $(options: $options:expr,)? summary: $summary:literal) => {
        $(#[$doc])*
        pub const $ident: Command = Command {
            name: $name,
            c_name: c_name!($name),
            args: $args,
            optional: command!(@or $($optional)?),
            options: command!(@or $($options)?),
            summary: $summary,
        };
    };
}

/// The ACL category the module puts every command in, where the server supports module
/// categories (Redis 7.4+, Valkey 8+): `ACL SETUSER app +@fencedlock` grants them all.
pub const ACL_CATEGORY: &str = "fencedlock";

/// [`ACL_CATEGORY`] NUL-terminated, for the module's C calls.
pub const ACL_CATEGORY_C: &CStr = c_name!("fencedlock");

const KEY: Arg = Arg { name: "key", kind: ArgKind::Key };
const TOKEN: Arg = Arg { name: "token", kind: ArgKind::Text };
const TTL: Arg = Arg { name: "ttl_ms", kind: ArgKind::Integer };

/// The option word of a blocking [`ACQUIRE`], after XREAD's `BLOCK`.
pub const BLOCK: &str = "BLOCK";

/// The option word of a labelled [`ACQUIRE`]: a public name for the lease, shown by [`STATUS`].
pub const LABEL: &str = "LABEL";

/// A blocking [`ACQUIRE`]'s timeout argument: `0` waits without a time limit (Redis's
/// convention for `BLOCK 0`), up to [`MAX_BLOCK_MS`](crate::limits::MAX_BLOCK_MS).
const TIMEOUT: Arg = Arg { name: "timeout_ms", kind: ArgKind::Integer };

/// A lease's label: 1 to [`MAX_LABEL_LEN`] opaque bytes ([`label_len_ok`]).
const LABEL_ARG: Arg = Arg { name: "label", kind: ArgKind::Text };

/// The option word of a semaphore [`ACQUIRE`]: how many holders the key admits at once.
pub const PERMITS: &str = "PERMITS";

/// A semaphore's permit count: 1 to [`MAX_PERMITS`] ([`permits_ok`]); 1 is the mutex.
const PERMITS_ARG: Arg = Arg { name: "permits", kind: ArgKind::Integer };

/// The option word of a shared [`ACQUIRE`]: a read lease of a read-write lock (a flag, no value).
pub const SHARED: &str = "SHARED";

/// [`SHARED`] in `COMMAND DOCS`: the word alone.
const SHARED_ARG: Arg = Arg { name: "shared", kind: ArgKind::Flag };

/// The permit count a key held [`SHARED`] shows in `STATUS` and carries in its records: no
/// count applies (any number of shared holders, up to [`MAX_PERMITS`], hold it together).
pub const SHARED_PERMITS: u32 = 0;

/// How many holders a key held with `permits` admits at once: the count itself, or
/// [`MAX_PERMITS`] readers for [`SHARED_PERMITS`].
pub const fn capacity(permits: u32) -> u32 {
    if permits == SHARED_PERMITS {
        MAX_PERMITS
    } else {
        permits
    }
}

command! {
    /// `FENCEDLOCK.ACQUIRE key token ttl_ms [BLOCK timeout_ms] [LABEL label]` → the fence, or
    /// nil while another token holds an unexpired lease (or others wait for it: nobody barges
    /// past the queue). The holder's own token gets the same fence again and a fresh ttl.
    /// Options come in any order, each at most once (a repeat is
    /// [`ReplyError::Syntax`](crate::ReplyError::Syntax)).
    ///
    /// With `BLOCK`, a busy key queues the caller in arrival order; when the lease ends
    /// (release, expiry, deletion, reclaim) the head of the queue is granted at once and gets
    /// its fence; nil when `timeout_ms` passes first (`0`: no time limit). Inside `MULTI`,
    /// scripts and functions it is one non-blocking attempt.
    ///
    /// With `LABEL`, the lease carries a **public** label (1 to [`MAX_LABEL_LEN`] bytes, e.g.
    /// a leader's address) that [`STATUS`] shows to anyone who may read the key: never put a
    /// secret in it. The label lives as long as the lease: a grant sets it (none without
    /// `LABEL`), the holder's re-entry with `LABEL` replaces it and without keeps it, `RENEW`
    /// and `RAISE` keep it, and release, expiry and handoff end it (a waiter granted in a
    /// handoff gets the label it asked with).
    ///
    /// With `PERMITS n` (1 to [`MAX_PERMITS`]) the key is a **semaphore**: up to `n` tokens
    /// hold leases at once, each with its own fence, ttl and label; fences still strictly
    /// increase over every grant on the key. `PERMITS 1`, like no `PERMITS`, is the mutex. A
    /// key's count is fixed while anyone holds it: an `ACQUIRE` with another count is refused
    /// ([`ReplyError::PermitsMismatch`](crate::ReplyError::PermitsMismatch)) and changes
    /// nothing; the first grant after the key went idle sets the count anew. `RENEW` and
    /// `RELEASE` act on the caller's own permit, by token; `RAISE` (fenced Redlock, which has
    /// no semaphores) replies nil on a semaphore key.
    ///
    /// With `SHARED` the lease is a **read lease** of a read-write lock, and an `ACQUIRE`
    /// without `SHARED` or `PERMITS` is its write lease: readers hold the key together (up to
    /// [`MAX_PERMITS`] of them, each with its own fence, ttl and label), a writer only alone.
    /// Every grant takes the next fence of the key's one sequence, so a writer's fence is above
    /// every earlier reader's and writer's. A reader is refused (nil) while another token
    /// writes, a writer while anyone reads, and a fresh grant of either mode while others wait
    /// in the key's queue: readers do not pass a waiting writer, so a stream of readers cannot
    /// starve it. The writer's own `ACQUIRE … SHARED` **downgrades** its lease, keeping its
    /// fence (readers waiting at the head of the queue are granted with it). A reader's
    /// `ACQUIRE` without `SHARED` is refused with
    /// [`ReplyError::UpgradeRefused`](crate::ReplyError::UpgradeRefused): two readers that
    /// both upgraded would wait for each other forever; release, then acquire the write lease
    /// (a new, higher fence). `STATUS` shows a key held shared as a semaphore of
    /// [`SHARED_PERMITS`] (0) permits and every reader; a write lease as a mutex. `SHARED`
    /// with `PERMITS` is [`ReplyError::Syntax`](crate::ReplyError::Syntax); a key held by a
    /// semaphore refuses a reader, and a key held shared refuses a semaphore's `ACQUIRE`, with
    /// [`ReplyError::PermitsMismatch`](crate::ReplyError::PermitsMismatch).
    ACQUIRE = "FENCEDLOCK.ACQUIRE",
    args: &[KEY, TOKEN, TTL],
    options: &[
        Opt { word: BLOCK, value: TIMEOUT },
        Opt { word: LABEL, value: LABEL_ARG },
        Opt { word: PERMITS, value: PERMITS_ARG },
        Opt { word: SHARED, value: SHARED_ARG },
    ],
    summary: "Takes the lease on key for token; replies its fence, or nil while another token holds it (BLOCK: waits in arrival order up to timeout_ms, 0 = no limit; LABEL: a public label shown by STATUS; PERMITS: up to n holders at once; SHARED: a read lease, held together with other readers)"
}

/// `ACQUIREALL`'s keys: their count, then the keys.
const KEYS: Arg = Arg { name: "key", kind: ArgKind::Keys };

command! {
    /// `FENCEDLOCK.ACQUIREALL numkeys key [key ...] token ttl_ms [LABEL label] [PERMITS n |
    /// SHARED]` → one fence per key, in the order given, or nil when any key would refuse
    /// [`ACQUIRE`] (held by another token, waited for by `BLOCK` callers): **all or nothing**.
    /// A nil or an error changes no key. Each key is decided as an `ACQUIRE` of the same token,
    /// ttl and options, so a key the token already holds is re-entered (same fence, fresh ttl:
    /// a retry after a lost reply gets the same fences) and each fresh grant takes the key's
    /// next fence. The keys are 1 to [`MAX_ACQUIRE_KEYS`](crate::limits::MAX_ACQUIRE_KEYS),
    /// distinct, and in a cluster in one slot (hash tags); `RENEW` and `RELEASE` stay per key.
    ///
    /// It never waits (`BLOCK` is a syntax error): a caller that holds nothing while it waits
    /// cannot deadlock with one that asks for an overlapping set in another order, so callers
    /// retry whole attempts with backoff.
    ACQUIREALL = "FENCEDLOCK.ACQUIREALL",
    args: &[KEYS, TOKEN, TTL],
    options: &[
        Opt { word: LABEL, value: LABEL_ARG },
        Opt { word: PERMITS, value: PERMITS_ARG },
        Opt { word: SHARED, value: SHARED_ARG },
    ],
    summary: "Takes leases on every key for token, all or nothing; replies one fence per key, or nil while any key is held by another token (LABEL, PERMITS, SHARED as for ACQUIRE; never blocks)"
}
command! {
    /// `FENCEDLOCK.RENEW key token ttl_ms` → 1 if the caller's unexpired lease now runs
    /// `ttl_ms` from now, else 0.
    RENEW = "FENCEDLOCK.RENEW",
    args: &[KEY, TOKEN, TTL],
    summary: "Extends the caller's unexpired lease to ttl_ms from now; 1 or 0"
}
command! {
    /// `FENCEDLOCK.RELEASE key token` → 1 if the caller held an unexpired lease and it ended
    /// now, else 0. The fence stays.
    RELEASE = "FENCEDLOCK.RELEASE",
    args: &[KEY, TOKEN],
    summary: "Ends the caller's unexpired lease, keeping the fence; 1 or 0"
}
command! {
    /// `FENCEDLOCK.RAISE key token fence` → the key's fence, now at least `fence`, if the
    /// caller holds the lease; nil otherwise. Fenced Redlock lifts every node to the quorum's
    /// maximum with it.
    RAISE = "FENCEDLOCK.RAISE",
    args: &[KEY, TOKEN, Arg { name: "fence", kind: ArgKind::Integer }],
    summary: "Raises the holder's fence to at least fence (fenced Redlock); the fence, or nil"
}
command! {
    /// `FENCEDLOCK.CAD key value` → 1 if a plain string key held `value` and was deleted,
    /// else 0 (compare-and-delete for plain `SET NX PX` locks).
    CAD = "FENCEDLOCK.CAD",
    args: &[KEY, Arg { name: "value", kind: ArgKind::Text }],
    summary: "Deletes a string key if it holds value; 1 or 0"
}
command! {
    /// `FENCEDLOCK.STATUS key` → [`LockStatus`](crate::LockStatus) as `[fence, held, pttl_ms or
    /// -1]`, and `[fence, 1, pttl_ms, label]` (the label a bulk string) while a labelled lease
    /// holds the key; nil for a key without lock state. Never a token.
    ///
    /// A semaphore key (granted with `PERMITS` above 1) replies
    /// [`SemaphoreStatus`](crate::SemaphoreStatus) instead: `[fence, holders, permits,
    /// [[fence, pttl_ms, label or nil], ...]]`, one entry per unexpired holder, oldest grant
    /// first (the fourth element is an array, where a labelled mutex has a bulk string).
    STATUS = "FENCEDLOCK.STATUS",
    args: &[KEY],
    summary: "Replies [fence, held, pttl_ms or -1] for a lock key, plus the label while a labelled lease holds it; [fence, holders, permits, [[fence, pttl_ms, label], ...]] for a semaphore; nil for a missing key"
}
command! {
    /// `FENCEDLOCK.APPLY key high_water fence [token remaining_us [label]]`: a lock's state as
    /// an effect record, sent by the module to replicas and the AOF. Refused from clients.
    APPLY = "FENCEDLOCK.APPLY",
    args: &[
        KEY,
        Arg { name: "high_water", kind: ArgKind::Integer },
        Arg { name: "fence", kind: ArgKind::Integer },
    ],
    optional: &[&[TOKEN, Arg { name: "remaining_us", kind: ArgKind::Integer }], &[LABEL_ARG]],
    summary: "Internal: a lock state record from the replication link or the AOF"
}

command! {
    /// `FENCEDLOCK.APPLYSEM key high_water fence permits holders`: a semaphore key's state as
    /// an effect record (see [`APPLY`]); `holders` is one binary string encoding every
    /// unexpired holder (the module's own format, never written by clients). Refused from
    /// clients.
    APPLYSEM = "FENCEDLOCK.APPLYSEM",
    args: &[
        KEY,
        Arg { name: "high_water", kind: ArgKind::Integer },
        Arg { name: "fence", kind: ArgKind::Integer },
        PERMITS_ARG,
        Arg { name: "holders", kind: ArgKind::Text },
    ],
    summary: "Internal: a semaphore state record from the replication link or the AOF"
}

/// Every command, in the order the module registers them.
pub const ALL: [Command; 9] = [ACQUIRE, ACQUIREALL, RENEW, RELEASE, RAISE, CAD, STATUS, APPLY, APPLYSEM];

/// Whether `token` has an acceptable length (1 to [`MAX_TOKEN_LEN`] bytes; content is opaque).
pub const fn token_len_ok(token: &[u8]) -> bool {
    !token.is_empty() && token.len() <= MAX_TOKEN_LEN
}

/// Whether `permits` is an acceptable permit count (1 to [`MAX_PERMITS`]).
pub const fn permits_ok(permits: u64) -> bool {
    permits >= 1 && permits <= MAX_PERMITS as u64
}

/// Whether `label` has an acceptable length (1 to [`MAX_LABEL_LEN`] bytes; content is opaque).
pub const fn label_len_ok(label: &[u8]) -> bool {
    !label.is_empty() && label.len() <= MAX_LABEL_LEN
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::MAX_ACQUIRE_KEYS;

    #[test]
    fn c_names_match_names_and_every_command_has_its_keys_first() {
        for command in ALL {
            assert_eq!(command.c_name.to_str(), Ok(command.name));
            assert!(command.name.starts_with("FENCEDLOCK."));
            assert!(matches!(command.args[0].kind, ArgKind::Key | ArgKind::Keys), "{}", command.name);
            let optional = command.optional.iter().flat_map(|group| group.iter());
            let options = command.options.iter().map(|opt| &opt.value);
            let is_key = |a: &&Arg| matches!(a.kind, ArgKind::Key | ArgKind::Keys);
            let keys = command.args.iter().chain(optional).chain(options).filter(is_key);
            assert_eq!(keys.count(), 1);
            assert_eq!(command.counts_keys(), command.name == ACQUIREALL.name);
            assert!(command.optional.is_empty() || command.options.is_empty(), "{}", command.name);
        }
    }

    #[test]
    fn acl_category_c_matches_acl_category() {
        assert_eq!(ACL_CATEGORY_C.to_str(), Ok(ACL_CATEGORY));
    }

    #[test]
    fn arity_follows_the_arguments() {
        assert_eq!(ACQUIRE.arity(), -4);
        assert_eq!(RELEASE.arity(), 3);
        assert_eq!(STATUS.arity(), 2);
        assert_eq!(APPLY.arity(), -4);
        // Three valued options and the SHARED flag: 0 to 7 words after the ttl.
        assert!((4..=11).all(|argc| ACQUIRE.accepts(argc)));
        assert!(!ACQUIRE.accepts(3) && !ACQUIRE.accepts(12));
        assert_eq!(APPLYSEM.arity(), 6);
        // numkeys and at least one key, the token and the ttl; any number of keys after.
        assert_eq!(ACQUIREALL.arity(), -5);
        assert!(!ACQUIREALL.accepts(4) && ACQUIREALL.accepts(5) && ACQUIREALL.accepts(5 + MAX_ACQUIRE_KEYS));
        assert!(RELEASE.accepts(3) && !RELEASE.accepts(4) && !RELEASE.accepts(2));
        assert!(APPLY.accepts(4) && APPLY.accepts(6) && APPLY.accepts(7));
        assert!(!APPLY.accepts(5) && !APPLY.accepts(8) && !APPLY.accepts(3));
    }

    #[test]
    fn token_lengths() {
        assert!(!token_len_ok(b""));
        assert!(token_len_ok(b"t"));
        assert!(token_len_ok(&[0; MAX_TOKEN_LEN]));
        assert!(!token_len_ok(&[0; MAX_TOKEN_LEN + 1]));
        assert!(!label_len_ok(b""));
        assert!(label_len_ok(b"l") && label_len_ok(&[0; MAX_LABEL_LEN]));
        assert!(!label_len_ok(&[0; MAX_LABEL_LEN + 1]));
        assert!(!permits_ok(0) && permits_ok(1) && permits_ok(MAX_PERMITS as u64));
        assert!(!permits_ok(MAX_PERMITS as u64 + 1));
    }
}
